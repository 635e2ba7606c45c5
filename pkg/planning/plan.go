// Package planning is critical-pod preemption's planning, shared by the
// kubelet's admission handler and critlet-explain: what an admission
// failure lacks (Shortfall), which pods may go and as what the selection
// sees them (Candidates), the first round's victims (Plan), what a pod
// frees (Request), the refusal's wording (Refusal), and a device
// shortfall in the predicate's terms (DeviceShortfall). It is pure:
// objects in, objects out.
package planning

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/victims"
)

// Shortfall splits the reasons the kubelet's admission predicate refused a
// pod into what preemption can fix, the resources the pod lacks and by how
// much, and the reasons it cannot.
func Shortfall(reasons []lifecycle.PredicateFailureReason) ([]victims.Requirement, []lifecycle.PredicateFailureReason) {
	var reqs []victims.Requirement
	var other []lifecycle.PredicateFailureReason
	for _, reason := range reasons {
		if r, ok := reason.(*lifecycle.InsufficientResourceError); ok {
			reqs = append(reqs, victims.Requirement{Resource: string(r.ResourceName), Quantity: r.GetInsufficientAmount()})
		} else {
			other = append(other, reason)
		}
	}
	return reqs, other
}

// Plan returns the pods the handler preempts first to admit admitPod, in
// the order it terminates them, when pods are the kubelet's active pods and
// reqs its shortfall. Victims that fail to stop can lead to more (see
// options.Options.MaxReplans); with the defaults, Plan is the whole choice. Errors
// are those of victims.Select: nothing would be preempted.
func Plan(policy victims.Policy, admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement) ([]*v1.Pod, error) {
	return plan(victims.Select, policy, admitPod, pods, reqs)
}

// PlanForDevices is Plan as the critical-device-preemption patch chooses
// for a device shortfall: full ties broken for the fewest victims
// (victims.SelectFewest).
func PlanForDevices(policy victims.Policy, admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement) ([]*v1.Pod, error) {
	return plan(victims.SelectFewest, policy, admitPod, pods, reqs)
}

func plan(choose func(victims.Policy, []victims.Requirement, []victims.Candidate) ([]int, error),
	policy victims.Policy, admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement) ([]*v1.Pod, error) {
	kept, cands, err := Candidates(admitPod, pods, reqs)
	if err != nil {
		return nil, err
	}
	plan, err := choose(policy, reqs, cands)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, len(plan))
	for k, i := range plan {
		out[k] = kept[i]
	}
	return out, nil
}

// Request is what preempting pod frees of resource name, as the handler
// counts it: 1 for pods, millicores for cpu, the base unit otherwise; -1
// for a malformed (negative) request.
func Request(pod *v1.Pod, name v1.ResourceName) int64 {
	return podRequests(pod, utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources)).value(name)
}

// Refusal is the error the handler returns when no set of pods can make
// room, worded as the stock kubelet's: admission puts it in the pod's
// status.
func Refusal(err error) error {
	return fmt.Errorf("preemption: error finding a set of pods to preempt: %w", err)
}
