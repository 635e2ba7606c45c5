//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// A component of the node fails while the kubelet is terminating victims for
// a critical pod. The node holds a BestEffort pod, two Burstable pods of
// 200m/200Mi and a Guaranteed one of the same size, all witnessed
// (witness_test.go) and ignoring SIGTERM for a 10 s grace period; the
// critical pod asks for the node less the Guaranteed pod, so upstream's rule
// takes exactly the two Burstable pods (they cover the shortfall between
// them; Guaranteed goes only for what Burstable cannot free) and the
// Guaranteed and BestEffort pods must survive. The fault begins once a
// victim has received SIGTERM, and both victims must still be alive (by
// their own heartbeats) when it does. Whatever the fault, what must hold
// afterwards is the same: the critical pod runs, once; exactly the two
// Burstable pods were preempted, each ending as a preempted pod does, each
// container started once by its own record; the survivors run on in their
// first containers.

// faultRecovering is critlet with the settings that make a preemption
// survive these faults: the third run of each.
var faultRecovering = critletKubelet.with([]string{"--critical-preemption-resume", "--critical-preemption-outage-recovery"}, nil)

// recovering reports whether e runs faultRecovering.
func (e *env) recovering() bool { return e.kubelet.name == faultRecovering.name }

var faultOptions = scenarioOptions{critletVariants: []kubeletUnderTest{faultRecovering}}

// The kubelet is killed outright and started again by its supervisor. The
// new kubelet knows nothing of the preemption under way: it admits the
// pods it finds in the API in creation order, the victims first, so the
// critical pod does not fit and it preempts again, choosing the same pods
// (which already were terminating). Each victim may therefore carry one
// Preempting event from each kubelet, never more. With
// --critical-preemption-resume the new kubelet continues the recorded
// preemption instead: one Preempting event per victim, and the critical pod
// runs once the first grace period has run out, not a second one.
func TestKubeletKilledMidPreemption(t *testing.T) {
	runScenario(t, "13 kubelet SIGKILL while victims terminate", faultOptions, func(e *env) {
		e.kubeletRestartedMidPreemption(suite.KillKubelet, "kubelet SIGKILLed and restarted")
	})
}

// The same with the kubelet stopped by SIGTERM, as systemctl restart or a
// package upgrade stops it: the stopping kubelet cancels the admission it
// is blocked in, and the record of the preemption must outlive that.
func TestKubeletStoppedMidPreemption(t *testing.T) {
	runScenario(t, "13b kubelet SIGTERM while victims terminate", faultOptions, func(e *env) {
		e.kubeletRestartedMidPreemption(suite.StopKubelet, "kubelet stopped by SIGTERM and restarted")
	})
}

// kubeletRestartedMidPreemption runs a fault scenario whose fault is stop
// and a new kubelet, and checks what its recovering run must do.
func (e *env) kubeletRestartedMidPreemption(stop func() error, what string) {
	maxEvents := 2
	if e.recovering() {
		maxEvents = 1
	}
	out := e.faultDuringPreemption(maxEvents, func() string {
		if err := stop(); err != nil {
			e.t.Fatalf("stopping the kubelet: %v", err)
		}
		if err := suite.StartKubelet(e.ctx); err != nil {
			e.t.Fatalf("restarting the kubelet: %v", err)
		}
		return what
	})
	if !e.recovering() {
		return
	}
	for i, r := range out.records {
		if len(r.sigterms) != 1 {
			e.t.Errorf("victim %s received %d SIGTERMs across the kubelet's two lives, want 1", out.victims[i].Name, len(r.sigterms))
		}
	}
	bound := faultGrace + out.faultTook + 3*time.Second
	if took := out.running.Sub(out.first.at); took > bound {
		e.t.Errorf("critical pod Running %s after the first SIGTERM, want within %s (grace + kubelet restart + 3s)", took.Round(10*time.Millisecond), bound.Round(10*time.Millisecond))
	}
}

// The API server goes away and comes back on the same etcd: the kubelet's
// status updates and events fail meanwhile and are retried.
func TestAPIServerRestartMidPreemption(t *testing.T) {
	runScenario(t, "14 kube-apiserver restart while victims terminate", faultOptions, func(e *env) {
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
// containers, live on. With --critical-preemption-outage-recovery the
// failed stop is retried as soon as containerd answers, so each victim is
// gone within its grace period plus the outage (plus 3s), and its status
// counts no restart.
func TestContainerdRestartMidPreemption(t *testing.T) {
	runScenario(t, "15 containerd restart while victims terminate", faultOptions, func(e *env) {
		out := e.faultDuringPreemption(1, func() string {
			if err := suite.RestartContainerd(e.ctx); err != nil {
				e.t.Fatalf("restarting containerd: %v", err)
			}
			return "containerd restarted"
		})
		if !e.recovering() {
			return
		}
		bound := faultGrace + out.faultTook + 3*time.Second
		for i, r := range out.records {
			v := out.final[i]
			if len(r.sigterms) == 0 {
				continue // already reported
			}
			// The heartbeat is rewritten every second: the victim was gone
			// at most a second after its last.
			if gone := r.lastBeat.Add(heartbeat).Sub(r.sigterms[0]); gone > bound {
				e.t.Errorf("victim %s gone at most %s after its first SIGTERM, want within %s (grace + outage + 3s)", v.Name, gone.Round(10*time.Millisecond), bound.Round(10*time.Millisecond))
			}
			if n := restarts(v); n != 0 {
				e.t.Errorf("victim %s's status counts %d restarts; its container started once", v.Name, n)
			}
		}
	})
}

// faultGrace is the victims' grace period in the fault scenarios, and
// heartbeat the witness's beat.
const (
	faultGrace = 10 * time.Second
	heartbeat  = time.Second
)

// faultOutcome is what a fault scenario observed, for the checks of its
// recovering run.
type faultOutcome struct {
	first     sigterm       // the first SIGTERM a victim received
	faultTook time.Duration // how long the fault lasted
	running   time.Time     // when the critical pod was seen Running
	victims   []*v1.Pod
	records   []lifeRecord // the victims' own records, in victims' order
	final     []*v1.Pod    // the victims as they ended
}

// faultDuringPreemption creates the critical pod, injects fault once the
// first victim has received SIGTERM, and checks the outcome; a victim may
// carry up to maxEvents Preempting events.
func (e *env) faultDuringPreemption(maxEvents int, fault func() string) faultOutcome {
	e.t.Helper()
	grace := int64(faultGrace / time.Second)
	w := e.newWitness()
	size := resources("200m", "200Mi")
	pods := e.createRunning(w.witnessed(bestEffort("besteffort"), grace),
		w.witnessed(burstable("burstable-a", "200m", "200Mi"), grace),
		w.witnessed(burstable("burstable-b", "200m", "200Mi"), grace),
		w.witnessed(guaranteed("guaranteed", "200m", "200Mi"), grace))
	be, victims, gu := pods[0], pods[1:3], pods[3]
	survivors := []*v1.Pod{be, gu}
	containers := map[string]string{}
	for _, p := range pods {
		containers[p.Name] = containerID(p)
	}
	need := e.allocatable()
	for name, q := range size {
		left := need[name]
		left.Sub(q)
		need[name] = left
	}

	start := time.Now()
	crit := e.create(critical("critical", need))
	first := e.waitSigterm(w, victims, time.Minute)
	faultStart := time.Now()
	what := fault()
	out := faultOutcome{first: first, faultTook: time.Since(faultStart), victims: victims}
	e.note("%s %s after the critical pod's creation, %s after %s received SIGTERM (the fault lasted %s)",
		what, faultStart.Sub(start).Round(10*time.Millisecond), faultStart.Sub(first.at).Round(10*time.Millisecond),
		first.pod.Name, time.Since(faultStart).Round(10*time.Millisecond))

	crit = e.waitPhase(crit, 4*time.Minute, v1.PodRunning)
	out.running = time.Now()
	e.row.latency = time.Since(start)
	// Time for a kubelet to do anything more it would wrongly do.
	e.settle(5 * time.Second)
	cur := e.expectPhase(crit, v1.PodRunning)
	if n := restarts(cur); n != 0 {
		e.t.Errorf("critical pod's container restarted %d times", n)
	}
	counts := make([]int, len(victims))
	var sigterms []string
	for i, v := range victims {
		cur := e.expectTerminatedByPreemption(v, killed)
		e.expectStartedOnce(cur, containers[v.Name])
		r := e.expectStartedOnceByRuntime(w, v)
		out.records = append(out.records, r)
		out.final = append(out.final, cur)
		if len(r.sigterms) == 0 {
			e.t.Errorf("victim %s never received SIGTERM by its own record", v.Name)
		}
		// Still terminating when the fault began: seen alive after it.
		if !r.lastBeat.After(faultStart) {
			e.t.Errorf("victim %s was last seen alive %s before the fault began: the fault did not land while it terminated",
				v.Name, faultStart.Sub(r.lastBeat))
		}
		sigterms = append(sigterms, fmt.Sprintf("%s %d", v.Name, len(r.sigterms)))
		counts[i] = e.eventCount(cur, reasonPreempting)
		if counts[i] < 1 || counts[i] > maxEvents {
			e.t.Errorf("victim %s has %d %s events, want 1 to %d", v.Name, counts[i], reasonPreempting, maxEvents)
		}
	}
	e.note("%s events: %s %d, %s %d; SIGTERMs received: %s", reasonPreempting, victims[0].Name, counts[0], victims[1].Name, counts[1],
		strings.Join(sigterms, ", "))
	for _, p := range survivors {
		cur = e.expectPhase(p, v1.PodRunning)
		e.expectStartedOnce(cur, containers[p.Name])
		if r := e.expectStartedOnceByRuntime(w, p); len(r.sigterms) != 0 {
			e.t.Errorf("surviving pod %s received %d SIGTERMs", p.Name, len(r.sigterms))
		}
		if restarts(cur) != 0 {
			e.t.Errorf("surviving pod %s's container restarted %d times", p.Name, restarts(cur))
		}
		if n := e.eventCount(cur, reasonPreempting); n != 0 {
			e.t.Errorf("surviving pod %s has %d %s events, want none", p.Name, n, reasonPreempting)
		}
	}
	e.expectVictims(victims[0].Name, victims[1].Name)
	return out
}

// sigterm is the first SIGTERM one of a set of witnessed pods received.
type sigterm struct {
	pod *v1.Pod
	at  time.Time
}

// waitSigterm waits until one of pods has received SIGTERM by its own
// record.
func (e *env) waitSigterm(w *witness, pods []*v1.Pod, timeout time.Duration) sigterm {
	e.t.Helper()
	var found sigterm
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, p := range pods {
			if r, err := w.read(p); err == nil && len(r.sigterms) > 0 {
				found = sigterm{p, r.sigterms[0]}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no SIGTERM received by %s within %s: %v", podNames(pods), timeout, err)
	}
	return found
}

// expectStartedOnce checks, from the kubelet's side, that p's container was
// started once (one Started event) and is still (or was last) the one with
// ID first. A status the kubelet built while the runtime could not answer
// may have lost the ID (and counted a restart for the missing container,
// which upstream does too): that is noted, and the container's own record
// (expectStartedOnceByRuntime) proves the single start.
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

// stubbornCommand ignores SIGTERM: the kubelet must wait out the grace
// period and kill it.
var stubbornCommand = []string{"/bin/sh", "-c", `trap "" TERM; while true; do sleep 1; done`}

// stubborn makes s ignore SIGTERM for a grace period of grace seconds.
func stubborn(s podSpec, grace int64) podSpec {
	s.command = stubbornCommand
	s.gracePeriod = ptr.To(grace)
	return s
}

// The runtime loses a victim's container while the kubelet terminates it
// (removed through CRI once the victim has received SIGTERM). Upstream
// infers from a running container gone missing that it was restarted,
// unless the pod was deleted through the API, and counts a restart for a
// container that started once; the stock kubelet and critlet's defaults
// are noted, whatever they count. With --critical-preemption-outage-recovery
// no restart is counted for a pod the kubelet is terminating, and the
// kubelet says so (proving the case arose).
func TestContainerLostMidPreemption(t *testing.T) {
	runScenario(t, "23 a victim's container lost by the runtime while it terminates", faultOptions, func(e *env) {
		w := e.newWitness()
		victim := e.createRunning(w.witnessed(burstable("burstable", "200m", "200Mi"), 30))[0]
		id := containerID(victim)
		need := e.allocatable()
		start := time.Now()
		crit := e.create(critical("critical", need))
		e.waitSigterm(w, []*v1.Pod{victim}, time.Minute)
		if err := suite.RemoveContainer(e.ctx, id); err != nil {
			e.t.Fatalf("removing the victim's container: %v", err)
		}
		e.waitPhase(crit, 2*time.Minute, v1.PodRunning)
		e.row.latency = time.Since(start)
		e.settle(5 * time.Second)
		cur := e.expectTerminatedByPreemption(victim, killed)
		if r := e.expectStartedOnceByRuntime(w, victim); len(r.sigterms) != 1 {
			e.t.Errorf("victim received %d SIGTERMs, want 1", len(r.sigterms))
		}
		e.note("victim's status: container ID %q, restart count %d", containerID(cur), restarts(cur))
		e.expectVictims(victim.Name)
		if !e.recovering() {
			return
		}
		if n := restarts(cur); n != 0 {
			e.t.Errorf("the victim's status counts %d restarts; its container started once", n)
		}
		// The container is gone from the status when the kubelet looked
		// after containerd had forgotten it, the case the setting is for:
		// the kubelet must then say it counted no restart. Had the kubelet
		// seen the container exit before containerd forgot it (a race this
		// machine has not lost yet), there is nothing to prove but the count.
		if containerID(cur) == "" {
			e.expectLogged(`"Not counting a restart for a container missing while its pod is terminated" pod="e2e/burstable"`)
		} else {
			e.note("the kubelet saw the container exit before the runtime forgot it: no restart to withhold")
		}
	})
}

// Upstream's kubelet garbage-collects an evicted pod's exited containers
// (a pass when it starts, then one about every minute), also while the
// pod's kill is still stopping the rest of it; the kill's final status then
// misses such a container and reports it as one the kubelet cannot find
// (removedNote). A victim whose container c exits 0 on SIGTERM while its
// sibling ignores SIGTERM for a grace period spanning a pass makes this
// happen on every kubelet, stock included: the ending a busy machine can
// give any victim that exits on SIGTERM, when its sandbox stop outlasts the
// moment of a pass.
func TestExitedContainerRemovedDuringKill(t *testing.T) {
	// Each run starts a kubelet, whose second pass comes about 60 s later
	// and its third about 120 s later. The kill begins a few seconds after
	// the start and must span the second pass, with a margin either side;
	// it must end well before the third, which would remove the sibling too.
	const grace = 75
	runScenario(t, "25 a victim's exited container removed by the kubelet during its kill", scenarioOptions{}, func(e *env) {
		s := burstable("two-containers", "100m", "100Mi")
		s.stubbornSibling = true
		s.gracePeriod = ptr.To(int64(grace))
		victim := e.createRunning(s)[0]
		// Running is reported a moment before pause handles SIGTERM.
		e.settle(2 * time.Second)
		crit := e.createCritical(critical("critical", e.allocatable()))
		e.waitPhase(crit, 3*time.Minute, v1.PodRunning)
		e.expectPreempted(victim, killed)
		cur, err := e.get(victim)
		if err != nil {
			e.t.Fatalf("getting %s: %v", victim.Name, err)
		}
		// Every container's end, not the phase alone.
		cur = e.waitEnded(cur, exitsOnTerm)
		// The kill begins with the victim's Preempting event (its
		// DisruptionTarget condition is stamped at the kill's end).
		var killBegun time.Time
		for _, ev := range e.events(victim, reasonPreempting) {
			killBegun = ev.FirstTimestamp.Time
		}
		if killBegun.IsZero() {
			e.t.Fatalf("%s has no %s event", victim.Name, reasonPreempting)
		}
		for _, c := range cur.Status.ContainerStatuses {
			switch t := c.State.Terminated; {
			case c.Name == stubbornName && (t == nil || t.ExitCode != 137 || t.Reason != "Error"):
				e.t.Errorf("container %s ended %s, want killed after the grace period (137, Error)", c.Name, describeState(c.State))
			case c.Name == stubbornName && t.FinishedAt.Sub(killBegun) < (grace-1)*time.Second:
				// Both times are in whole seconds.
				e.t.Errorf("container %s killed %s after the kill began, before its grace period of %d s", c.Name, t.FinishedAt.Sub(killBegun), grace)
			case c.Name != stubbornName && !removedByKubelet(c, true):
				e.t.Errorf("container %s ended %s (last state %s, restarts %d), want upstream's ending for a container removed during the kill: %s",
					c.Name, describeState(c.State), describeState(c.LastTerminationState), c.RestartCount, removedNote)
			}
		}
		if len(cur.Status.ContainerStatuses) != 2 {
			e.t.Errorf("victim has %d container statuses, want 2", len(cur.Status.ContainerStatuses))
		}
		e.note("container c %s", removedNote)
		e.expectVictims(victim.Name)
	})
}
