//go:build e2enode

package e2enode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// unstoppableHandler is a containerd runtime handler whose runc refuses to
// signal containers while told to: the runtime "fails to stop" them, as a
// hung runtime or a process stuck in the kernel would.
const unstoppableHandler = "unstoppable"

type unstoppableRuntime struct {
	binary string // the runc wrapper containerd runs for the handler
	marker string // while this file exists, "kill" fails
}

var unstoppable unstoppableRuntime

func writeUnstoppableRuntime(dir string) (unstoppableRuntime, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return unstoppableRuntime{}, fmt.Errorf("runc: %w", err)
	}
	r := unstoppableRuntime{binary: filepath.Join(dir, "runc"), marker: filepath.Join(dir, "refuse-kill")}
	script := fmt.Sprintf(`#!/bin/sh
# runc, except that "kill" fails while %[1]s exists.
for arg in "$@"; do
  if [ "$arg" = kill ] && [ -e %[1]q ]; then
    echo "runc kill refused by the test runtime" >&2
    exit 1
  fi
done
exec %[2]q "$@"
`, r.marker, runc)
	if err := os.WriteFile(r.binary, []byte(script), 0o755); err != nil {
		return unstoppableRuntime{}, fmt.Errorf("writing the unstoppable runtime: %w", err)
	}
	return r, nil
}

// refuse makes the handler refuse kills until the test ends.
func (r unstoppableRuntime) refuse(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(r.marker, nil, 0o644); err != nil {
		t.Fatalf("arming the unstoppable runtime: %v", err)
	}
	t.Cleanup(func() { os.Remove(r.marker) })
}

// admitPastStuckVictim runs a 200m/200Mi Burstable pod under the
// unstoppable handler beside spares, arms the handler, and creates a
// critical pod short of exactly the stuck pod's share: upstream's rule
// picks the stuck pod alone (the Burstable pod closest to the need). It
// checks that the stuck pod was chosen once, that its kill timed out
// (ExceededGracePeriod) and that it still runs, and returns the pods with
// the critical pod, which is admitted all the same.
func (e *env) admitPastStuckVictim(spares ...podSpec) (stuck *v1.Pod, running []*v1.Pod, crit *v1.Pod) {
	e.t.Helper()
	e.ensureRuntimeClass(unstoppableHandler)
	s := burstable("unstoppable", "200m", "200Mi")
	s.gracePeriod = ptr.To(int64(5))
	s.runtimeClass = unstoppableHandler
	pods := e.createRunning(append([]podSpec{s}, spares...)...)
	unstoppable.refuse(e.t)
	need := e.allocatable()
	for _, sp := range spares {
		for name, q := range sp.requests {
			left := need[name]
			left.Sub(q)
			need[name] = left
		}
	}
	crit = e.createCritical(critical("critical", need))
	e.note("critical pod events: %v", e.eventReasons(crit))
	if n := e.eventCount(pods[0], reasonPreempting); n != 1 {
		e.t.Errorf("stuck pod has %d %s events, want 1: it must be chosen first", n, reasonPreempting)
	}
	if ev := e.events(pods[0], "ExceededGracePeriod"); len(ev) == 0 {
		e.t.Errorf("stuck pod has no ExceededGracePeriod event: its kill did not time out")
	}
	if cur := e.expectPhase(pods[0], v1.PodRunning); len(cur.Status.ContainerStatuses) == 1 && cur.Status.ContainerStatuses[0].State.Running == nil {
		e.t.Errorf("stuck pod's container is not running: %+v", cur.Status.ContainerStatuses[0].State)
	}
	return pods[0], pods[1:], crit
}
