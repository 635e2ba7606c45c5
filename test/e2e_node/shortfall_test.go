//go:build e2enode

package e2enode

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Preemptions that cannot make room.

// Every pod that could free enough is protected: a critical pod of the
// same priority holds most of the node, and the one pod that may be
// preempted holds less than is missing. Nothing can be done, so nothing is
// preempted: the kubelet refuses the critical pod with the handler's error
// (UnexpectedAdmissionError), and critlet says why in a
// PreemptionImpossible event.
func TestPreemptionImpossible(t *testing.T) {
	runScenario(t, "17 preemption impossible", scenarioOptions{}, func(e *env) {
		all := e.allocatable()
		cpu, mem := all[v1.ResourceCPU], all[v1.ResourceMemory]
		cpu.Sub(resource.MustParse("300m"))
		mem.Sub(resource.MustParse("300Mi"))
		holder := critical("critical-holder", v1.ResourceList{v1.ResourceCPU: cpu, v1.ResourceMemory: mem})
		pods := e.createRunning(holder, burstable("small", "100m", "100Mi"))
		// 200m and 200Mi are free; 300m and 300Mi more are missing, the
		// small pod holds a third of it.
		p := e.create(critical("critical", resources("500m", "500Mi")))
		cur := e.waitPhase(p, 2*time.Minute, v1.PodRunning, v1.PodFailed)
		e.note("critical pod: %s %s", cur.Status.Phase, cur.Status.Reason)
		const stockMessage = "preemption: error finding a set of pods to preempt"
		if cur.Status.Phase != v1.PodFailed || cur.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(cur.Status.Message, stockMessage) {
			e.t.Errorf("critical pod that cannot fit: %s %q (%s), want Failed UnexpectedAdmissionError with %q", cur.Status.Phase, cur.Status.Reason, cur.Status.Message, stockMessage)
		}
		e.expectPreemptorEvent(cur, "PreemptionImpossible")
		e.settle(3 * time.Second)
		for _, p := range pods {
			e.expectPhase(p, v1.PodRunning)
			if n := e.eventCount(p, reasonPreempting); n != 0 {
				e.t.Errorf("pod %s has %d %s events, want none", p.Name, n, reasonPreempting)
			}
		}
		e.expectVictims()
	})
}

// A victim that cannot be killed, and too little left to re-plan with: the
// runtime refuses to stop the chosen pod, and the one other pod holds less
// than the stuck one should have freed. The stock kubelet, and critlet by
// default, log the failed kill and admit the critical pod. With
// re-planning on, critlet looks for other victims, finds that no set of
// the untried pods covers the shortfall, kills none of them (they would
// die for nothing), admits the critical pod as stock does and says what is
// still missing in a PreemptionIncomplete event.
func TestPreemptionIncomplete(t *testing.T) {
	replanning := critletKubelet.with([]string{"--critical-preemption-max-replans=2"}, nil)
	runScenario(t, "18 preemption incomplete", scenarioOptions{critletVariants: []kubeletUnderTest{replanning}}, func(e *env) {
		stuck, spares, crit := e.admitPastStuckVictim(burstable("spare", "100m", "100Mi"))
		e.expectPhase(spares[0], v1.PodRunning)
		if n := e.eventCount(spares[0], reasonPreempting); n != 0 {
			e.t.Errorf("spare pod has %d %s events, want none: it cannot cover the shortfall", n, reasonPreempting)
		}
		e.expectPreemptorEvent(crit, "PreemptionIncomplete")
		if e.kubelet.name == replanning.name {
			e.expectLogged("Cannot re-plan critical-pod preemption")
		}
		e.expectVictims()
		e.row.victims = append(e.row.victims, stuck.Name+" (kill timed out)")
	})
}
