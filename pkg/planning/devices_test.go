package planning

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/devicedemand"
)

func TestDeviceShortfallPrefersTheDeviceManager(t *testing.T) {
	const gpu = v1.ResourceName("example.com/gpu")
	other := &lifecycle.PredicateFailureError{PredicateName: "p", PredicateDesc: "d"}
	predicate := []lifecycle.PredicateFailureReason{
		&lifecycle.InsufficientResourceError{ResourceName: v1.ResourceCPU, Requested: 1, Used: 2, Capacity: 2},
		&lifecycle.InsufficientResourceError{ResourceName: gpu, Requested: 2, Used: 3, Capacity: 3},
		other,
	}
	got := DeviceShortfall(predicate, []devicedemand.Shortage{{Resource: string(gpu), Requested: 2, Used: 4, Capacity: 4}})
	if len(got) != 3 || got[0] != predicate[0] || got[1] != lifecycle.PredicateFailureReason(other) {
		t.Fatalf("merged = %v", got)
	}
	if ir := got[2].(*lifecycle.InsufficientResourceError); *ir != (lifecycle.InsufficientResourceError{ResourceName: gpu, Requested: 2, Used: 4, Capacity: 4}) {
		t.Errorf("device shortfall = %+v, want the device manager's", ir)
	}
	if got := DeviceShortfall(predicate[:1], nil); len(got) != 1 || got[0] != predicate[0] {
		t.Errorf("no device shortfall: %v, want the predicate's reasons", got)
	}
}
