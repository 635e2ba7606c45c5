package planning

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/devicedemand"
)

// HeldDevices counts, for a device-plugin resource the critical pod is
// short of, the devices of it pod holds that the device manager could
// allocate (its healthy ones, each counted once); ok is false for any
// other resource, whose request counts as ever.
type HeldDevices func(pod *v1.Pod, resource v1.ResourceName) (n int64, ok bool)

// DeviceShortfall returns the admission predicate's reasons less its
// shortfalls of the resources in short, followed by short's: the device
// manager, not the node's status, decides what it can allocate. It is what
// the critical-preemption-devices patch hands the critical-pod handler, and
// what critlet-explain plans with. O(reasons + shortages).
func DeviceShortfall(predicate []lifecycle.PredicateFailureReason, short []devicedemand.Shortage) []lifecycle.PredicateFailureReason {
	isShort := map[v1.ResourceName]bool{}
	for _, s := range short {
		isShort[v1.ResourceName(s.Resource)] = true
	}
	var out []lifecycle.PredicateFailureReason
	for _, r := range predicate {
		if ir, ok := r.(*lifecycle.InsufficientResourceError); ok && isShort[ir.ResourceName] {
			continue
		}
		out = append(out, r)
	}
	for _, s := range short {
		out = append(out, &lifecycle.InsufficientResourceError{
			ResourceName: v1.ResourceName(s.Resource), Requested: s.Requested, Used: s.Used, Capacity: s.Capacity,
		})
	}
	return out
}
