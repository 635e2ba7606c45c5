package planning

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/victims"
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

// A pod is credited with the healthy devices it holds, not its request: the
// holder of an unhealthy device frees nothing the critical pod can use, and
// is never chosen for devices where a holder of a healthy one would be.
func TestCandidatesHoldingCreditsHeldDevices(t *testing.T) {
	const gpu = v1.ResourceName("example.com/gpu")
	pod := func(name, cpu string) *v1.Pod {
		req := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), gpu: resource.MustParse("1")}
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: req, Limits: req}}}}}
	}
	// Upstream's rule takes the pod closest to the shortfall first: the
	// unhealthy holder's cpu matches the shortfall's exactly.
	pods := []*v1.Pod{pod("unhealthy-holder", "1"), pod("healthy-holder", "3")}
	critical := pod("critical", "1")
	prio := int32(2000001000)
	critical.Spec.Priority = &prio
	critical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	reqs := []victims.Requirement{{Resource: string(v1.ResourceCPU), Quantity: 1000}, {Resource: string(gpu), Quantity: 1}}
	held := func(p *v1.Pod, r v1.ResourceName) (int64, bool) {
		if r != gpu {
			return 0, false
		}
		return map[string]int64{"healthy-holder": 1}[p.Name], true
	}
	_, cands, err := CandidatesHolding(critical, pods, reqs, held)
	if err != nil {
		t.Fatal(err)
	}
	if got := [][]int64{cands[0].Requests, cands[1].Requests}; got[0][1] != 0 || got[1][1] != 1 || got[0][0] != 1000 || got[1][0] != 3000 {
		t.Fatalf("requests = %v, want cpu as requested and the devices held: [[1000 0] [3000 1]]", got)
	}
	plan, err := victims.Select(victims.PolicyUpstream, reqs, cands)
	if err != nil || len(plan) != 1 || plan[0] != 1 {
		t.Errorf("credited by holding: plan = %v, %v; want the healthy holder alone", plan, err)
	}
	// Credited by request, as without held, the unhealthy holder would be
	// the one chosen.
	_, byRequest, err := Candidates(critical, pods, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if plan, err := victims.Select(victims.PolicyUpstream, reqs, byRequest); err != nil || len(plan) != 1 || plan[0] != 0 {
		t.Fatalf("by request: plan = %v, %v; the case no longer tells the two apart", plan, err)
	}
}
