//go:build e2ecluster

package e2ecluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// resumeLine is what critlet logs when it continues a recorded preemption.
const resumeLine = "Resuming the preemption an earlier kubelet began for this pod"

// rebootMidPreemption turns on --critical-preemption-resume on worker n2
// (through /etc/default/critlet, as an operator does), gives it a
// critical pod whose victims ignore SIGTERM for their whole grace period,
// and cuts the machine's power once the kubelet has recorded and begun
// the preemption. The machine boots again: the kubelet, started by
// systemd, continues the recorded preemption (its log says so) rather
// than choosing afresh: the victims are those recorded before the cut,
// each with one Preempting event, and the critical pod runs.
func (e *env) rebootMidPreemption(t *testing.T) {
	const node = "n2"
	settings := filepath.Join(e.c.RootDir(node), "etc/default/critlet")
	if err := os.WriteFile(settings, []byte("CRITLET_PREEMPTION_RESUME=true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.in(t, node, "systemctl", "restart", "kubelet")
	e.waitHeartbeat(t, node, time.Now(), 2*time.Minute)

	var fill []string
	var pods []pod
	free := e.freeCPU(t, node)
	for i := 0; free-300 >= 100; i++ {
		p := pod{name: fmt.Sprintf("stubborn-%d", i), node: node, grace: 300, shell: "trap '' TERM; while :; do sleep 1; done", resources: cpuRequest(300)}
		fill = append(fill, p.name)
		pods = append(pods, p)
		free -= 300
	}
	e.apply(t, pods...)
	e.kubectl(t, append([]string{"wait", "--for=condition=Ready", "--timeout=180s", "pod"}, fill...)...)
	crit := pod{name: "critical-resumed", namespace: "kube-system", node: node, class: "system-node-critical", resources: cpuRequest(e.freeCPU(t, node) + 400)}
	// How many pods the preemption takes: upstream's handler's count on
	// the same pods, so that the wait below ends once every kill is asked
	// for, not after a guessed pause.
	want := e.predictVictims(t, node, crit.manifest())
	e.apply(t, crit)
	// Begun: the kubelet sends each victim's Preempting event as it asks
	// for its kill, after writing the record (its condition reaches the
	// API only once the victim is gone, minutes from now).
	var recorded []string
	for deadline := time.Now().Add(time.Minute); len(recorded) < len(want); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d victims of critical-resumed asked to stop within a minute:\n%s", len(recorded), len(want), e.kubectl(t, "get", "pods", "--all-namespaces", "-o", "wide"))
		}
		recorded = e.preemptedByEvents(t, "stubborn-")
	}
	if _, err := os.Stat(filepath.Join(e.c.RootDir(node), "var/lib/kubelet/critlet/preemptions")); err != nil {
		t.Fatalf("the preemption record: %v", err)
	}
	cut := time.Now()
	if err := e.c.PowerCut(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Boot(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	e.waitPodReady(t, "kube-system", "critical-resumed", 5*time.Minute)
	running := time.Since(cut)
	// The machines' journal is volatile: this boot's alone.
	journal := e.in(t, node, "journalctl", "--unit=kubelet", "--no-pager", "--output=cat", "--boot")
	if !strings.Contains(journal, resumeLine) {
		t.Errorf("the kubelet after the boot did not resume the recorded preemption (no %q in its journal)", resumeLine)
	}
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got = e.preemptedByEvents(t, "stubborn-")
		if slices.Equal(got, recorded) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(got, recorded) {
		t.Errorf("victims after the boot %v, recorded before the power cut %v", got, recorded)
	}
	for _, v := range recorded {
		if n := e.preemptingEvents(t, v); n != 1 {
			t.Errorf("victim %s has %d Preempting events, want 1 (chosen once, across the reboot)", v, n)
		}
	}
	e.row("| power cut of %s mid-preemption (--critical-preemption-resume) | resumed after the boot, critical pod Running %s after the cut, victims %v as recorded |",
		node, running.Round(time.Second), got)
	e.kubectl(t, "delete", "pod", "--namespace=kube-system", "critical-resumed", "--wait=false")
	e.kubectl(t, append([]string{"delete", "pod", "--ignore-not-found", "--wait=false", "--grace-period=1"}, fill...)...)
}

// preemptedByEvents names, sorted, the pods in namespace default named
// with prefix that have a Preempting event.
func (e *env) preemptedByEvents(t *testing.T, prefix string) []string {
	t.Helper()
	var list struct {
		Items []struct {
			InvolvedObject struct{ Name string } `json:"involvedObject"`
		}
	}
	out := e.kubectl(t, "get", "events", "--namespace=default", "--field-selector=reason=Preempting", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range list.Items {
		if strings.HasPrefix(ev.InvolvedObject.Name, prefix) && !slices.Contains(names, ev.InvolvedObject.Name) {
			names = append(names, ev.InvolvedObject.Name)
		}
	}
	slices.Sort(names)
	return names
}

// preemptingEvents counts the kubelet's Preempting events for pod.
func (e *env) preemptingEvents(t *testing.T, pod string) int {
	t.Helper()
	var list struct {
		Items []struct{ Count int }
	}
	out := e.kubectl(t, "get", "events", "--namespace=default", "--field-selector=reason=Preempting,involvedObject.name="+pod, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		n += max(ev.Count, 1)
	}
	return n
}
