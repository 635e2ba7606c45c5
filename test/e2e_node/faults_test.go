//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// A component of the node fails while the kubelet is terminating victims for
// a critical pod: upstream's three pods, the Burstable and Guaranteed ones
// ignoring SIGTERM for a 10 s grace period, so that the fault lands while
// the first victim is still terminating. Whatever the fault, what must hold
// afterwards is the same: the critical pod runs, once; exactly the pods
// upstream's rule chose were preempted, each ending as a preempted pod does
// and none started again; the BestEffort pod runs on in the same container.

// The kubelet is killed outright and started again by its supervisor. The
// new kubelet knows nothing of the preemption under way: it admits the
// pods it finds in the API in creation order, the victims first, so the
// critical pod does not fit and it preempts again, choosing the same pods
// (which already were terminating). Each victim may therefore carry one
// Preempting event from each kubelet, never more.
func TestKubeletKilledMidPreemption(t *testing.T) {
	runScenario(t, "13 kubelet SIGKILL while victims terminate", scenarioOptions{}, func(e *env) {
		e.faultDuringPreemption(2, func() string {
			if err := suite.KillKubelet(); err != nil {
				e.t.Fatalf("killing the kubelet: %v", err)
			}
			if err := suite.StartKubelet(e.ctx); err != nil {
				e.t.Fatalf("restarting the kubelet: %v", err)
			}
			return "kubelet SIGKILLed and restarted"
		})
	})
}

// The API server goes away and comes back on the same etcd: the kubelet's
// status updates and events fail meanwhile and are retried.
func TestAPIServerRestartMidPreemption(t *testing.T) {
	runScenario(t, "14 kube-apiserver restart while victims terminate", scenarioOptions{}, func(e *env) {
		e.faultDuringPreemption(1, func() string {
			if err := suite.RestartAPIServer(e.ctx); err != nil {
				e.t.Fatalf("restarting the API server: %v", err)
			}
			return "kube-apiserver restarted"
		})
	})
}

// containerd goes away and comes back: the kubelet's runtime calls fail
// meanwhile, a stop in flight among them; the shims, and so the
// containers, live on.
func TestContainerdRestartMidPreemption(t *testing.T) {
	runScenario(t, "15 containerd restart while victims terminate", scenarioOptions{}, func(e *env) {
		e.faultDuringPreemption(1, func() string {
			if err := suite.RestartContainerd(e.ctx); err != nil {
				e.t.Fatalf("restarting containerd: %v", err)
			}
			return "containerd restarted"
		})
	})
}

// stubbornCommand ignores SIGTERM: the kubelet must wait out the grace
// period and kill it.
var stubbornCommand = []string{"/bin/sh", "-c", `trap "" TERM; while true; do sleep 1; done`}

// stubborn makes s ignore SIGTERM for a grace period of grace seconds.
func stubborn(s podSpec, grace int64) podSpec {
	s.command = stubbornCommand
	s.gracePeriod = ptr.To(grace)
	return s
}

// faultDuringPreemption creates the critical pod, injects fault once the
// first victim's termination has begun, and checks the outcome; a victim
// may carry up to maxEvents Preempting events.
func (e *env) faultDuringPreemption(maxEvents int, fault func() string) {
	e.t.Helper()
	pods := e.createRunning(bestEffort("besteffort"),
		stubborn(burstable("burstable", "100m", "100Mi"), 10),
		stubborn(guaranteed("guaranteed", "100m", "100Mi"), 10))
	be, victims := pods[0], pods[1:]
	containers := map[string]string{}
	for _, p := range pods {
		containers[p.Name] = containerID(p)
	}

	start := time.Now()
	crit := e.create(critical("critical", e.allocatable()))
	first := e.waitEvent(victims, reasonPreempting, time.Minute)
	faultAt := time.Since(start)
	what := fault()
	e.note("%s %s after the critical pod's creation, once %s's termination had begun (the fault lasted %s)",
		what, faultAt.Round(10*time.Millisecond), first.Name, (time.Since(start) - faultAt).Round(10*time.Millisecond))

	crit = e.waitPhase(crit, 4*time.Minute, v1.PodRunning)
	e.row.latency = time.Since(start)
	// Time for a kubelet to do anything more it would wrongly do.
	e.settle(5 * time.Second)
	cur := e.expectPhase(crit, v1.PodRunning)
	if n := restarts(cur); n != 0 {
		e.t.Errorf("critical pod's container restarted %d times", n)
	}
	counts := make([]int, len(victims))
	for i, v := range victims {
		cur := e.expectTerminatedByPreemption(v, killed)
		e.expectStartedOnce(cur, containers[v.Name])
		counts[i] = e.eventCount(cur, reasonPreempting)
		if counts[i] < 1 || counts[i] > maxEvents {
			e.t.Errorf("victim %s has %d %s events, want 1 to %d", v.Name, counts[i], reasonPreempting, maxEvents)
		}
	}
	e.note("%s events: %s %d, %s %d", reasonPreempting, victims[0].Name, counts[0], victims[1].Name, counts[1])
	cur = e.expectPhase(be, v1.PodRunning)
	e.expectStartedOnce(cur, containers[be.Name])
	if restarts(cur) != 0 {
		e.t.Errorf("BestEffort pod's container restarted %d times", restarts(cur))
	}
	if n := e.eventCount(cur, reasonPreempting); n != 0 {
		e.t.Errorf("BestEffort pod has %d %s events, want none", n, reasonPreempting)
	}
	e.expectVictims(victims[0].Name, victims[1].Name)
}

// expectStartedOnce checks that p's container was started once, and is
// still (or was last) the one with ID first. A status the kubelet built
// while the runtime could not answer may have lost the ID (and counted a
// restart for the missing container, which upstream does too); the
// Started events then tell.
func (e *env) expectStartedOnce(p *v1.Pod, first string) {
	e.t.Helper()
	if id := containerID(p); id != "" && id != first {
		e.t.Errorf("pod %s runs container %s, was %s", p.Name, id, first)
	}
	if n := e.eventCount(p, "Started"); n != 1 {
		e.t.Errorf("pod %s's container was started %d times, want once", p.Name, n)
	}
	if id, n := containerID(p), restarts(p); id != first || n != 0 {
		e.note("%s's status after the fault: container ID %q, restart count %d", p.Name, id, n)
	}
}

// waitEvent waits until one of pods has an event with reason, and returns
// that pod.
func (e *env) waitEvent(pods []*v1.Pod, reason string, timeout time.Duration) *v1.Pod {
	e.t.Helper()
	var found *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, p := range pods {
			if len(e.events(p, reason)) > 0 {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no %s event on %s within %s: %v", reason, podNames(pods), timeout, err)
	}
	return found
}

func podNames(pods []*v1.Pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return fmt.Sprint(names)
}

// containerID is the ID of p's only container, "" before it has one.
func containerID(p *v1.Pod) string {
	if len(p.Status.ContainerStatuses) != 1 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

func restarts(p *v1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}
