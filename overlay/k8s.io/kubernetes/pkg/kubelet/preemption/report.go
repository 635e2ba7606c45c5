package preemption

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/pkg/victims"
)

// Event reasons on the critical pod, which the stock kubelet leaves without
// any.
const (
	reasonPreempted            = "PreemptedForAdmission"
	reasonPreemptionReplanned  = "PreemptionReplanned"
	reasonPreemptionIncomplete = "PreemptionIncomplete"
	reasonPreemptionImpossible = "PreemptionImpossible"
)

// report records one event on the critical pod saying what was preempted,
// for what, under which policy and how long it took; a warning when victims
// failed to terminate or the need was not met.
func (a *admission) report(rest []victims.Requirement, elapsed time.Duration) {
	c := a.handler
	if len(a.victims) == 0 && victims.Met(rest) {
		return // nothing was missing
	}
	took := elapsed.Round(time.Millisecond)
	what := fmt.Sprintf("preempted %s to free %s (policy %s) in %s", podList(a.victims), describe(a.reqs), c.opts.Policy, took)
	// A held pod is admitted after this, through every admit handler.
	admitted, then := "Admitted", ""
	if a.held {
		admitted, then = "Done", "; admission follows"
	}
	switch {
	case !victims.Met(rest):
		c.recorder.Eventf(a.admitPod, v1.EventTypeWarning, reasonPreemptionIncomplete,
			"%s with %s still missing after %d re-planning rounds: %s; %d failed to terminate: %s%s",
			admitted, describe(rest), a.replans, what, len(a.failed), failureList(a.failed), then)
	case len(a.failed) > 0:
		c.recorder.Eventf(a.admitPod, v1.EventTypeWarning, reasonPreemptionReplanned,
			"Re-planned %d times: %s; %d failed to terminate: %s%s", a.replans, what, len(a.failed), failureList(a.failed), then)
	default:
		c.recorder.Eventf(a.admitPod, v1.EventTypeNormal, reasonPreempted, "%s: %s%s", admitted, what, then)
	}
}

// listed bounds how many pods an event names; events are capped in size.
const listed = 10

func podList(pods []*v1.Pod) string {
	noun := "pods"
	if len(pods) == 1 {
		noun = "pod"
	}
	return fmt.Sprintf("%d %s (%s)", len(pods), noun, bounded(len(pods), ", ", func(k int) string { return klog.KObj(pods[k]).String() }))
}

func failureList(fs []failure) string {
	return bounded(len(fs), "; ", func(k int) string { return fmt.Sprintf("%s: %v", klog.KObj(fs[k].pod), fs[k].err) })
}

// bounded joins the first listed of n items and says how many it left out.
func bounded(n int, sep string, item func(int) string) string {
	parts := make([]string, 0, min(n, listed)+1)
	for k := 0; k < min(n, listed); k++ {
		parts = append(parts, item(k))
	}
	if n > listed {
		parts = append(parts, fmt.Sprintf("and %d more", n-listed))
	}
	return strings.Join(parts, sep)
}

// describe renders requirements in the units users write them in.
func describe(reqs []victims.Requirement) string {
	var parts []string
	for _, r := range reqs {
		if r.Quantity <= 0 {
			continue
		}
		var q *resource.Quantity
		switch v1.ResourceName(r.Resource) {
		case v1.ResourceCPU:
			q = resource.NewMilliQuantity(r.Quantity, resource.DecimalSI)
		case v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourceStorage:
			q = resource.NewQuantity(r.Quantity, resource.BinarySI)
		default:
			q = resource.NewQuantity(r.Quantity, resource.DecimalSI)
		}
		parts = append(parts, fmt.Sprintf("%s %s", r.Resource, q))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
