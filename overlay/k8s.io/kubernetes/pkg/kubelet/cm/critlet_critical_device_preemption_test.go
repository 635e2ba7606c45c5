//go:build critlet_patch

package cm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/settings"
)

const (
	critletGPU = "example.com/gpu"
	critletNIC = "example.com/nic"
)

// critletDeviceNode is a device manager and the pods around it: which
// device each pod's container holds, which pods are active, and an
// allocate handler that admits a pod only when enough healthy devices are
// free, taking them.
type critletDeviceNode struct {
	healthy  []string
	holds    map[types.UID]map[string][]string // pod → container → device IDs
	active   map[types.UID]bool
	freeable bool // whether UpdateAllocatedDevices frees inactive pods'
	// refuseAgain makes the second allocation fail (another pod took the
	// freed devices meanwhile).
	refuseAgain bool
	// refuseWith, when set, is every allocation's refusal: another
	// handler's, or the topology manager's.
	refuseWith  *lifecycle.PodAdmitResult
	allocations int
	// numaNodes lists each device this many times, as the device manager
	// lists a device on several NUMA nodes once per node (0 means once).
	numaNodes int
	// nicHolder, when set, holds the node's one NIC, n0, in its container
	// c (a second resource).
	nicHolder types.UID
}

// critletCountRefusal is the device manager's refusal for too few free
// devices, as the topology manager's admit handler words it.
func critletCountRefusal(requested, available int) lifecycle.PodAdmitResult {
	return lifecycle.PodAdmitResult{Reason: "UnexpectedAdmissionError", Message: fmt.Sprintf(
		"Allocate failed due to requested number of devices unavailable for %s. Requested: %d, Available: %d, which is unexpected", critletGPU, requested, available)}
}

// A defaulted kubelet configuration's resource-manager policies.
var critletDefaultManagers = planning.NodeManagers{Topology: "none", CPU: "none", Memory: "None"}

// The topology manager's refusal under restricted or single-numa-node.
var critletTopologyRefusal = lifecycle.PodAdmitResult{Reason: "TopologyAffinityError", Message: "Resources cannot be allocated with Topology locality"}

func (n *critletDeviceNode) GetAllocatableDevices(klog.Logger) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for _, id := range n.healthy {
		for range max(n.numaNodes, 1) {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: critletGPU, DeviceIds: []string{id}})
		}
	}
	if n.nicHolder != "" {
		out = append(out, &podresourcesapi.ContainerDevices{ResourceName: critletNIC, DeviceIds: []string{"n0"}})
	}
	return out
}

func (n *critletDeviceNode) GetDevices(podUID, container string) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	if n.nicHolder != "" && types.UID(podUID) == n.nicHolder && container == "c" {
		out = append(out, &podresourcesapi.ContainerDevices{ResourceName: critletNIC, DeviceIds: []string{"n0"}})
	}
	ids := n.holds[types.UID(podUID)][container]
	if len(ids) == 0 {
		return out
	}
	for range max(n.numaNodes, 1) {
		out = append(out, &podresourcesapi.ContainerDevices{ResourceName: critletGPU, DeviceIds: ids})
	}
	return out
}

func (n *critletDeviceNode) UpdateAllocatedDevices(klog.Logger) {
	if !n.freeable {
		return
	}
	for uid := range n.holds {
		if !n.active[uid] {
			delete(n.holds, uid)
		}
	}
}

func (n *critletDeviceNode) free() []string {
	var out []string
	for _, id := range n.healthy {
		held := false
		for _, cs := range n.holds {
			for _, ids := range cs {
				held = held || slices.Contains(ids, id)
			}
		}
		if !held {
			out = append(out, id)
		}
	}
	return out
}

func (n *critletDeviceNode) Admit(_ context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	n.allocations++
	// The device manager frees the devices of pods no longer active before
	// it allocates.
	n.UpdateAllocatedDevices(klog.Background())
	if n.refuseWith != nil {
		return *n.refuseWith
	}
	c := attrs.Pod.Spec.Containers[0]
	if _, nic := c.Resources.Limits[critletNIC]; nic && n.nicHolder != "" && n.active[n.nicHolder] {
		return lifecycle.PodAdmitResult{Reason: "UnexpectedAdmissionError", Message: "Allocate failed due to requested number of devices unavailable for " +
			critletNIC + ". Requested: 1, Available: 0, which is unexpected"}
	}
	q := c.Resources.Limits[critletGPU]
	want := int(q.Value())
	free := n.free()
	if n.allocations > 1 && n.refuseAgain {
		return critletCountRefusal(want, len(free)-1)
	}
	if len(free) < want {
		return critletCountRefusal(want, len(free))
	}
	if want > 0 {
		n.holds[attrs.Pod.UID] = map[string][]string{c.Name: free[:want]}
	}
	n.active[attrs.Pod.UID] = true
	return lifecycle.PodAdmitResult{Admit: true}
}

func (n *critletDeviceNode) activePods(pods []*v1.Pod) func() []*v1.Pod {
	return func() []*v1.Pod {
		var out []*v1.Pod
		for _, p := range pods {
			if n.active[p.UID] {
				out = append(out, p)
			}
		}
		return out
	}
}

// critletKiller stands for the critical-pod handler: it records the
// shortfall, the devices held and the exclusion it is given, and starts the
// kills of the pods it was told to choose (the excluded passed over); end
// ends them.
type critletKiller struct {
	node    *critletDeviceNode
	choose  []types.UID
	err     error
	got     []lifecycle.PredicateFailureReason
	held    planning.HeldDevices
	exclude func(types.UID) bool
	calls   int
	leftout []lifecycle.PredicateFailureReason
	done    func(bool, []types.UID)
	chosen  []types.UID
}

func (k *critletKiller) PreemptForDevices(_ context.Context, _ *v1.Pod, reasons []lifecycle.PredicateFailureReason, held planning.HeldDevices,
	exclude func(types.UID) bool, done func(bool, []types.UID)) (int, []lifecycle.PredicateFailureReason, error) {
	k.calls++
	k.got, k.held, k.exclude = reasons, held, exclude
	if k.err != nil {
		return 0, reasons, k.err
	}
	if len(k.leftout) > 0 {
		return 0, k.leftout, nil
	}
	k.chosen = slices.DeleteFunc(slices.Clone(k.choose), exclude)
	k.done = done
	return len(k.chosen), nil, nil
}

// end ends the kills: the chosen pods terminated (no longer active) when
// freed, all failed (still running) otherwise.
func (k *critletKiller) end(freed bool) {
	if freed {
		for _, uid := range k.chosen {
			k.node.active[uid] = false
		}
		k.done(true, nil)
		return
	}
	k.done(false, k.chosen)
}

func critletPod(name string, cpu string, gpus int64, priority int32) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: &priority, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
			Limits:   v1.ResourceList{},
		}}}},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests[critletGPU] = q
		p.Spec.Containers[0].Resources.Limits[critletGPU] = q
	}
	return p
}

// critletSetup is a node of 4 devices and 8 cpus, each of four pods
// holding a device and a cpu, and a critical pod asking for 2 devices and
// cpu.
func critletSetup(criticalCPU string) (*critletDeviceNode, []*v1.Pod, *v1.Pod, *critletKiller, *critletDevicePreemption) {
	n := &critletDeviceNode{healthy: []string{"d0", "d1", "d2", "d3"}, holds: map[types.UID]map[string][]string{}, active: map[types.UID]bool{}, freeable: true}
	var pods []*v1.Pod
	for i, name := range []string{"a", "b", "c", "d"} {
		p := critletPod(name, "1", 1, 0)
		pods = append(pods, p)
		n.holds[p.UID] = map[string][]string{"c": {n.healthy[i]}}
		n.active[p.UID] = true
	}
	critical := critletPod("critical", criticalCPU, 2, 2000001000)
	// Being admitted, it is in the pod manager: active for the kubelet.
	n.active[critical.UID] = true
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110"),
		critletGPU: resource.MustParse("4"),
	}}}
	k := &critletKiller{node: n}
	w := &critletDevicePreemption{
		inner:   n,
		devices: n,
		probe: func(capture lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitHandler {
			return lifecycle.NewPredicateAdmitHandler(func(context.Context, bool) (*v1.Node, error) { return node, nil }, capture,
				func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil })
		},
		preempt:    k,
		managers:   critletDefaultManagers,
		recorder:   record.NewFakeRecorder(10),
		activePods: n.activePods(append(slices.Clone(pods), critical)),
		awaiting:   func(uid types.UID) bool { return uid == critical.UID && n.active[uid] },
		ctx:        context.Background(),
	}
	return n, pods, critical, k, w
}

// critletPreempted admits attrs.Pod through w as the kubelet does with the
// setting on: refused and held while the victims terminate (tried again
// meanwhile, still held, nothing preempted again), then, the kills ended
// (freed or not), admitted again with the pods active then; it returns
// that admission. A first refusal of another kind is returned as it is.
func critletPreempted(t *testing.T, w *critletDevicePreemption, k *critletKiller, attrs *lifecycle.PodAdmitAttributes, pods []*v1.Pod, freed bool) lifecycle.PodAdmitResult {
	t.Helper()
	ctx := context.Background()
	first := w.Admit(ctx, attrs)
	if first.Reason != CritletReasonPreemptingForDevices {
		return first
	}
	if first.Admit || k.done == nil {
		t.Fatalf("held (%+v) with no kills begun", first)
	}
	calls := k.calls
	if again := w.Admit(ctx, critletAdd(attrs.Pod, k.node.activePods(pods)())); again.Reason != CritletReasonPreemptingForDevices || k.calls != calls {
		t.Fatalf("tried again while the victims terminate: %+v after %d preemptions, want held after %d", again, k.calls, calls)
	}
	k.end(freed)
	return w.Admit(ctx, critletAdd(attrs.Pod, k.node.activePods(pods)()))
}

func critletAdd(pod *v1.Pod, others []*v1.Pod) *lifecycle.PodAdmitAttributes {
	return &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: slices.Clone(others), Operation: lifecycle.AddOperation}
}

func critletShortOf(t *testing.T, reasons []lifecycle.PredicateFailureReason) map[v1.ResourceName]lifecycle.InsufficientResourceError {
	t.Helper()
	out := map[v1.ResourceName]lifecycle.InsufficientResourceError{}
	for _, r := range reasons {
		ir, ok := r.(*lifecycle.InsufficientResourceError)
		if !ok {
			t.Fatalf("reason %v is not a resource shortfall", r)
		}
		out[ir.ResourceName] = *ir
	}
	return out
}

func TestCritletDevicePreemptionAdmitsOnceTheVictimsDevicesAreFree(t *testing.T) {
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"b", "d"}
	attrs := critletAdd(critical, pods)
	res := critletPreempted(t, w, k, attrs, pods, true)
	if !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	short := critletShortOf(t, k.got)
	if len(short) != 1 || short[critletGPU] != (lifecycle.InsufficientResourceError{ResourceName: critletGPU, Requested: 2, Used: 4, Capacity: 4}) {
		t.Fatalf("shortfall handed to the critical-pod handler = %+v, want 2 devices of 4 all used", short)
	}
	if got := n.holds[critical.UID]["c"]; !slices.Equal(got, []string{"d1", "d3"}) {
		t.Errorf("critical pod got devices %v, want the victims' d1 d3", got)
	}
	if n.allocations != 3 {
		t.Errorf("%d allocations, want the refused one, one while held and one after the kills", n.allocations)
	}
	if w.flight != nil {
		t.Error("the answered preemption is still in flight")
	}
}

// While one critical pod's victims terminate, another critical pod short
// of devices is held too, preempting nothing (the pods are weighed once
// they are gone); once the first is answered, the second preempts for
// itself.
func TestCritletDevicePreemptionOneAtATime(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("first critical pod: %+v, want held", res)
	}
	// Once admitted, the first holds its devices as an active pod.
	pods = append(pods, critical)
	second := critletPod("second", "500m", 2, 2000001000)
	res := w.Admit(ctx, critletAdd(second, n.activePods(pods)()))
	if res.Reason != CritletReasonPreemptingForDevices || !strings.Contains(res.Message, "default/critical") || k.calls != 1 {
		t.Fatalf("second critical pod: %+v after %d preemptions, want held for the first's victims after 1", res, k.calls)
	}
	k.end(true)
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); !res.Admit {
		t.Fatalf("first critical pod after its victims: %+v", res)
	}
	k.choose = []types.UID{"c", "d"}
	k.done = nil
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 2 || k.done == nil {
		t.Fatalf("second critical pod once the first was answered: %+v after %d preemptions, want its own", res, k.calls)
	}
}

// A preemption whose pod is never tried again (deleted while held: no
// longer active) is cleared by the next critical pod's admission once its
// kills have ended.
func TestCritletDevicePreemptionLeftOverIsCleared(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a"}
	critical.Spec.Containers[0].Resources.Limits[critletGPU] = resource.MustParse("1")
	critical.Spec.Containers[0].Resources.Requests[critletGPU] = resource.MustParse("1")
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	k.end(true)
	n.active[critical.UID] = false // deleted while held, refused: no longer awaited
	other := critletPod("other", "500m", 1, 2000001000)
	if res := w.Admit(ctx, critletAdd(other, n.activePods(pods)())); !res.Admit || w.flight != nil {
		t.Fatalf("another critical pod once the kills ended: %+v (in flight: %v), want admitted on the freed device and nothing in flight", res, w.flight != nil)
	}
}

// Until the preempting pod has had its answer, the devices freed are its:
// it stays held while its victims terminate even when others free devices
// (the predicate would weigh the victims still there), and another pod
// asking for them, critical or not, is held unallocated; a pod asking for
// none is admitted as upstream.
func TestCritletDevicePreemptionKeepsTheFreedDevicesForItsPod(t *testing.T) {
	critletmetrics.Register()
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	admitted := critletmetrics.DevicePreemptions.WithLabelValues("admitted")
	before, _ := testutil.GetCounterMetricValue(admitted)
	n.active["c"], n.active["d"] = false, false
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("devices freed by others while its victims terminate: %+v, want held", res)
	}
	allocations := n.allocations
	plain := critletPod("plain", "100m", 1, 0)
	if res := w.Admit(ctx, critletAdd(plain, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || n.allocations != allocations {
		t.Fatalf("a pod asking for the devices: %+v after %d allocations, want held unallocated", res, n.allocations-allocations)
	}
	if res := w.Admit(ctx, critletAdd(critletPod("cpu-only", "100m", 0, 0), n.activePods(pods)())); !res.Admit {
		t.Fatalf("a pod asking for no device: %+v, want admitted", res)
	}
	initOnly := critletPod("init-only", "100m", 0, 0)
	initOnly.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{critletGPU: resource.MustParse("1")}}}}
	if res := w.Admit(ctx, critletAdd(initOnly, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("a pod whose init container asks for the devices: %+v, want held", res)
	}
	k.end(true)
	if res := w.Admit(ctx, critletAdd(plain, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("a pod asking for the devices once the kills ended, before the preempting pod's answer: %+v, want held", res)
	}
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); !res.Admit {
		t.Fatalf("once the kills ended: %+v, want admitted", res)
	}
	if res := w.Admit(ctx, critletAdd(plain, n.activePods(pods)())); !res.Admit {
		t.Fatalf("a pod asking for the devices once the preempting pod was answered: %+v, want admitted on a free one", res)
	}
	if after, _ := testutil.GetCounterMetricValue(admitted); after != before+1 || k.calls != 1 {
		t.Errorf("admitted counted %v then %v after %d preemptions, want once after one", before, after, k.calls)
	}
}

// A victim whose kill failed, still there, is excluded from the next
// device preemption: killed again it would free nothing sooner. Gone, it
// is forgotten.
func TestCritletDevicePreemptionPassesOverStuckVictims(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	if got := critletPreempted(t, w, k, critletAdd(critical, pods), pods, false); got.Admit {
		t.Fatalf("admitted with its victims stuck: %+v", got)
	}
	second := critletPod("second", "500m", 2, 2000001000)
	k.choose = []types.UID{"a", "c", "d"}
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 2 {
		t.Fatalf("%+v after %d preemptions, want a second preemption", res, k.calls)
	}
	if !slices.Equal(k.chosen, []types.UID{"c", "d"}) || !k.exclude("a") || !k.exclude("b") || k.exclude("c") {
		t.Errorf("chose %v, want the stuck a and b passed over", k.chosen)
	}
	n.active["a"] = false
	// The next preemption's test.
	if stuck := w.stuck(); stuck("a") || !stuck("b") {
		t.Error("a stuck victim gone is still passed over, or one still there no longer is")
	}
}

// critletAdmitAll is a predicate that admits every pod: the node's status
// counting more devices than the device manager can allocate.
type critletAdmitAll struct{}

func (critletAdmitAll) Admit(context.Context, *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	return lifecycle.PodAdmitResult{Admit: true}
}

// The predicate admitting the pod (its view of the devices is the node
// status's) leaves the devices' shortfall alone to preempt for.
func TestCritletDevicePreemptionWhenThePredicateAdmits(t *testing.T) {
	_, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	w.probe = func(lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitHandler { return critletAdmitAll{} }
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	if short := critletShortOf(t, k.got); k.calls != 1 || len(short) != 1 || short[critletGPU].Requested != 2 {
		t.Errorf("%d calls with %+v, want one call short of 2 devices alone", k.calls, short)
	}
}

// Devices held by a pod's init container are held: counted as used, and
// waited for until freed.
func TestCritletDevicePreemptionCountsInitContainersDevices(t *testing.T) {
	n, pods, critical, k, w := critletSetup("500m")
	a := pods[0]
	a.Spec.InitContainers = []v1.Container{{Name: "init"}}
	n.holds[a.UID] = map[string][]string{"init": {"d0"}}
	k.choose = []types.UID{"a", "b"}
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	if gpu := critletShortOf(t, k.got)[critletGPU]; gpu.Used != 4 {
		t.Errorf("device shortfall %+v, want all 4 devices used (one by an init container)", gpu)
	}
	// The device manager keeps an init container's devices until the pod
	// is removed: killing the pod frees it.
	if got, ok := k.held(a, critletGPU); got != 1 || !ok {
		t.Errorf("the pod whose init container holds d0 is credited with %d devices (%v), want 1", got, ok)
	}
	if got := n.holds[critical.UID]["c"]; !slices.Equal(got, []string{"d0", "d1"}) {
		t.Errorf("critical pod got devices %v, want the victims' d0 d1", got)
	}
}

// The predicate's cpu shortfall and the devices' reach the critical-pod
// handler together, in one call.
func TestCritletDevicePreemptionChoosesForDevicesAndCPUTogether(t *testing.T) {
	_, pods, critical, k, w := critletSetup("5")
	k.choose = []types.UID{"a", "b"}
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	short := critletShortOf(t, k.got)
	if k.calls != 1 || len(short) != 2 {
		t.Fatalf("%d calls with %+v, want one call short of cpu and devices", k.calls, short)
	}
	if cpu := short[v1.ResourceCPU]; cpu.Requested != 5000 || cpu.Used != 4000 || cpu.Capacity != 8000 {
		t.Errorf("cpu shortfall %+v, want the predicate's: 5000m asked, 4000m of 8000m used", cpu)
	}
	if gpu := short[critletGPU]; gpu.Requested != 2 || gpu.Used != 4 || gpu.Capacity != 4 {
		t.Errorf("device shortfall %+v", gpu)
	}
}

func TestCritletDevicePreemptionRefusesAsUpstream(t *testing.T) {
	critletmetrics.Register() // counters count only once registered
	upstream := critletCountRefusal(2, 0)
	tests := []struct {
		name  string
		setup func(n *critletDeviceNode, k *critletKiller, pod **v1.Pod, attrs *lifecycle.PodAdmitAttributes)
		// calls is how many times the critical-pod handler is asked.
		calls int
		want  lifecycle.PodAdmitResult
		// result is the device-preemption metric's label counted, where
		// the handler was asked.
		result string
	}{
		{"no set of pods frees enough", func(n *critletDeviceNode, k *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			k.err = errors.New("no set of running pods found to reclaim resources")
		}, 1, upstream, "no_victims"},
		{"the handler leaves a reason", func(n *critletDeviceNode, k *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			k.leftout = []lifecycle.PredicateFailureReason{&lifecycle.PredicateFailureError{PredicateName: "x", PredicateDesc: "y"}}
		}, 1, upstream, "no_victims"},
		{"the victims do not terminate", func(n *critletDeviceNode, k *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			k.choose = []types.UID{"a", "b"}
			n.freeable = false
		}, 1, upstream, "not_freed"},
		{"another pod took the freed devices", func(n *critletDeviceNode, k *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			k.choose = []types.UID{"a", "b"}
			n.refuseAgain = true
		}, 1, critletCountRefusal(2, 1), "refused"},
		{"the topology manager refuses on a node that never aligns", func(n *critletDeviceNode, _ *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			n.refuseWith = &critletTopologyRefusal
		}, 0, critletTopologyRefusal, ""},
		{"the topology manager refuses with devices enough", func(n *critletDeviceNode, _ *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			n.refuseWith = &critletTopologyRefusal
			n.healthy = append(n.healthy, "d4", "d5")
		}, 0, critletTopologyRefusal, ""},
		{"a plugin is away", func(n *critletDeviceNode, _ *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			n.refuseWith = &lifecycle.PodAdmitResult{Reason: "UnexpectedAdmissionError", Message: "Allocate failed due to cannot allocate unregistered device " + critletGPU + ", which is unexpected"}
		}, 0, lifecycle.PodAdmitResult{Reason: "UnexpectedAdmissionError", Message: "Allocate failed due to cannot allocate unregistered device " + critletGPU + ", which is unexpected"}, ""},
		{"not critical", func(_ *critletDeviceNode, _ *critletKiller, pod **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			(*pod).Spec.Priority = new(int32)
		}, 0, upstream, ""},
		{"a resize", func(_ *critletDeviceNode, _ *critletKiller, _ **v1.Pod, attrs *lifecycle.PodAdmitAttributes) {
			attrs.Operation = lifecycle.ResizeOperation
		}, 0, upstream, ""},
		{"a count refusal with devices enough by now", func(n *critletDeviceNode, _ *critletKiller, _ **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			n.refuseWith = &lifecycle.PodAdmitResult{Reason: "UnexpectedAdmissionError", Message: critletCountRefusal(2, 0).Message}
			n.healthy = append(n.healthy, "d4", "d5")
		}, 0, upstream, ""},
		{"the predicate refuses before weighing resources", func(_ *critletDeviceNode, _ *critletKiller, pod **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			(*pod).Spec.OS = &v1.PodOS{Name: "windows"}
		}, 0, upstream, ""},
		{"the predicate refuses for a reason preemption cannot fix", func(_ *critletDeviceNode, _ *critletKiller, pod **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			(*pod).Spec.NodeSelector = map[string]string{"disk": "ssd"}
		}, 0, upstream, ""},
		{"a device request the device manager refuses (a held count changed)", func(n *critletDeviceNode, _ *critletKiller, pod **v1.Pod, _ *lifecycle.PodAdmitAttributes) {
			n.holds[(*pod).UID] = map[string][]string{"c": {"d9"}}
			n.active[(*pod).UID] = true
		}, 0, upstream, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, pods, critical, k, w := critletSetup("500m")
			attrs := critletAdd(critical, pods)
			tc.setup(n, k, &critical, attrs)
			attrs.Pod = critical
			counted := func() float64 {
				v, err := testutil.GetCounterMetricValue(critletmetrics.DevicePreemptions.WithLabelValues(tc.result))
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			var before float64
			if tc.result != "" {
				before = counted()
			}
			got := critletPreempted(t, w, k, attrs, pods, n.freeable)
			if got != tc.want {
				t.Errorf("Admit = %+v, want %+v", got, tc.want)
			}
			if tc.result != "" && counted() != before+1 {
				t.Errorf("kubelet_critical_device_preemptions_total{result=%q} went from %v to %v, want one more", tc.result, before, counted())
			}
			if k.calls != tc.calls {
				t.Errorf("critical-pod handler asked %d times, want %d", k.calls, tc.calls)
			}
			if tc.calls == 0 && len(attrs.OtherPods) != len(pods) {
				t.Errorf("the other pods changed without a preemption: %d of %d", len(attrs.OtherPods), len(pods))
			}
		})
	}
}

// On a node whose topology, CPU or memory manager could refuse the freed
// devices, a critical pod short of devices is refused as upstream refuses
// it (a count refusal, or the topology manager's where it aligns), nothing
// is killed, and the pod's events say why.
func TestCritletDevicePreemptionKillsNothingWhereManagersCouldRefuse(t *testing.T) {
	critletmetrics.Register()
	with := func(f func(*planning.NodeManagers)) planning.NodeManagers {
		m := critletDefaultManagers
		f(&m)
		return m
	}
	for _, tc := range []struct {
		name       string
		managers   planning.NodeManagers
		guaranteed bool
		refusal    *lifecycle.PodAdmitResult
	}{
		{"restricted", with(func(m *planning.NodeManagers) { m.Topology = "restricted" }), false, &critletTopologyRefusal},
		{"single-numa-node", with(func(m *planning.NodeManagers) { m.Topology = "single-numa-node" }), true, &critletTopologyRefusal},
		{"static CPU manager, a Guaranteed pod", with(func(m *planning.NodeManagers) { m.CPU = "static" }), true, nil},
		{"static memory manager, a Guaranteed pod", with(func(m *planning.NodeManagers) { m.Memory = "Static" }), true, nil},
		{"a policy not known", planning.NodeManagers{}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, pods, critical, k, w := critletSetup("500m")
			k.choose = []types.UID{"a", "b"}
			n.refuseWith = tc.refusal
			want := critletCountRefusal(2, 0)
			if tc.refusal != nil {
				want = *tc.refusal
			}
			if tc.guaranteed {
				c := &critical.Spec.Containers[0].Resources
				c.Requests[v1.ResourceMemory] = resource.MustParse("1Gi")
				c.Limits[v1.ResourceCPU], c.Limits[v1.ResourceMemory] = c.Requests[v1.ResourceCPU], c.Requests[v1.ResourceMemory]
			}
			w.managers = tc.managers
			events := record.NewFakeRecorder(10)
			w.recorder = events
			unsupported := critletmetrics.DevicePreemptions.WithLabelValues("unsupported_node")
			before, err := testutil.GetCounterMetricValue(unsupported)
			if err != nil {
				t.Fatal(err)
			}
			attrs := critletAdd(critical, pods)
			if got := w.Admit(context.Background(), attrs); got != want {
				t.Errorf("Admit = %+v, want upstream's refusal %+v", got, want)
			}
			if k.calls != 0 || len(attrs.OtherPods) != len(pods) {
				t.Errorf("critical-pod handler asked %d times, %d of %d other pods left: want nothing killed", k.calls, len(attrs.OtherPods), len(pods))
			}
			if after, _ := testutil.GetCounterMetricValue(unsupported); after != before+1 {
				t.Errorf("unsupported_node counted %v then %v, want one more", before, after)
			}
			select {
			case e := <-events.Events:
				why := planning.DevicePreemptionUnsupported(tc.managers, tc.guaranteed)
				if !strings.HasPrefix(e, "Warning "+critletReasonDevicePreemptionSkipped+" ") || !strings.Contains(e, why) {
					t.Errorf("event %q, want a %s warning saying %q", e, critletReasonDevicePreemptionSkipped, why)
				}
			default:
				t.Error("no event says why nothing was preempted")
			}
		})
	}
}

// The static managers allocate for Guaranteed pods only: a Burstable
// critical pod still preempts for devices under them.
func TestCritletDevicePreemptionUnderStaticManagersForABurstablePod(t *testing.T) {
	_, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	w.managers = planning.NodeManagers{Topology: "best-effort", CPU: "static", Memory: "Static"}
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit || k.calls != 1 {
		t.Fatalf("Admit = %+v after %d preemptions, want admitted after one", res, k.calls)
	}
}

func TestCritletPreemptDevicesWrapsOnlyWhenOn(t *testing.T) {
	defer kubeletstate.SetSettings(kubeletstate.Get().Settings)
	n, pods, _, k, _ := critletSetup("1")
	sysctl, predicate := &critletDeviceNode{}, &critletDeviceNode{}
	handlers := []lifecycle.PodAdmitHandler{sysctl, n, predicate}
	cfg := &kubeletconfig.KubeletConfiguration{TopologyManagerPolicy: "single-numa-node", CPUManagerPolicy: "static", MemoryManagerPolicy: "None"}
	install := func() []lifecycle.PodAdmitHandler {
		return CritletPreemptDevices(context.Background(), handlers, 1, cfg, n, nil, nil, k, n.activePods(pods), func(types.UID) bool { return false }, record.NewFakeRecorder(1))
	}
	kubeletstate.SetSettings(settings.Defaults())
	if got := install(); &got[0] != &handlers[0] || got[1] != lifecycle.PodAdmitHandler(n) {
		t.Fatal("setting off: the handlers were changed")
	}
	kubeletstate.SetSettings(settings.Defaults().With(patched.CriticalDevicePreemption, true))
	got := install()
	wrapped, ok := got[1].(*critletDevicePreemption)
	if !ok || wrapped.inner != lifecycle.PodAdmitHandler(n) || got[0] != lifecycle.PodAdmitHandler(sysctl) || got[2] != lifecycle.PodAdmitHandler(predicate) {
		t.Fatalf("setting on: handlers %v, want only the allocate handler wrapped", got)
	}
	if want := (planning.NodeManagers{Topology: "single-numa-node", CPU: "static", Memory: "None"}); wrapped.managers != want {
		t.Errorf("the wrapped handler sees the policies %+v, want the configuration's %+v", wrapped.managers, want)
	}
	if handlers[1] != lifecycle.PodAdmitHandler(n) {
		t.Fatal("the caller's slice was changed")
	}
	for _, at := range []int{-1, 2, 3} {
		if _, err := critletWrapAllocateHandler(handlers, at, func(h lifecycle.PodAdmitHandler) lifecycle.PodAdmitHandler { return h }); err == nil || !strings.Contains(err.Error(), "not before the predicate handler") {
			t.Errorf("allocate handler at %d: %v, want a refusal", at, err)
		}
	}
}

// Each pod is credited with the healthy devices it holds, each once: a pod
// holding only an unhealthy device (or an ID the plugin no longer lists)
// frees nothing the critical pod can use, and a device on two NUMA nodes
// is one device, for the other pods and for the critical pod's own (a
// container that holds its devices keeps them). The native resources'
// requests stand.
func TestCritletDevicePreemptionCreditsHealthyHeldDevices(t *testing.T) {
	n, pods, critical, k, w := critletSetup("500m")
	n.numaNodes = 2
	n.healthy = append(n.healthy, "d4")
	one := v1.ResourceList{critletGPU: resource.MustParse("1")}
	critical.Spec.Containers = append(critical.Spec.Containers, v1.Container{Name: "side", Resources: v1.ResourceRequirements{Requests: one, Limits: one}})
	n.holds[critical.UID] = map[string][]string{"side": {"d4"}}
	n.active[critical.UID] = true
	stale := critletPod("stale", "1", 1, 0)
	n.holds[stale.UID] = map[string][]string{"c": {"gone"}}
	n.active[stale.UID] = true
	pods = append(pods, stale)
	w.activePods = n.activePods(append(slices.Clone(pods), critical))
	k.choose = []types.UID{"a", "b"}
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	if short := critletShortOf(t, k.got); short[critletGPU] != (lifecycle.InsufficientResourceError{ResourceName: critletGPU, Requested: 2, Used: 5, Capacity: 5}) {
		t.Fatalf("shortfall = %+v, want 2 more devices of 5 all used, each device counted once", short)
	}
	for _, c := range []struct {
		pod  *v1.Pod
		res  v1.ResourceName
		want int64
		ok   bool
	}{
		{pods[0], critletGPU, 1, true},
		{stale, critletGPU, 0, true},
		{critical, critletGPU, 1, true}, // d4, listed on two NUMA nodes
		{pods[0], v1.ResourceCPU, 0, false},
	} {
		if got, ok := k.held(c.pod, c.res); got != c.want || ok != c.ok {
			t.Errorf("held(%s, %s) = %d, %v; want %d, %v", c.pod.Name, c.res, got, ok, c.want, c.ok)
		}
	}
}

// Devices the device manager keeps for an active pod the handlers do not
// weigh (one device-readmission holds, with no allocation) are used: the
// shortfall counts them, or the victims chosen would free too little.
func TestCritletDevicePreemptionCountsDevicesOfPodsNotAllocated(t *testing.T) {
	n, pods, critical, k, w := critletSetup("500m")
	n.healthy = append(n.healthy, "d4")
	held := critletPod("held", "1", 1, 0)
	n.holds[held.UID] = map[string][]string{"c": {"d4"}}
	n.active[held.UID] = true
	w.activePods = n.activePods(append(slices.Clone(pods), held, critical))
	k.choose = []types.UID{"a", "b"}
	if res := critletPreempted(t, w, k, critletAdd(critical, pods), pods, true); !res.Admit {
		t.Fatalf("refused: %+v", res)
	}
	if short := critletShortOf(t, k.got); short[critletGPU] != (lifecycle.InsufficientResourceError{ResourceName: critletGPU, Requested: 2, Used: 5, Capacity: 5}) {
		t.Fatalf("shortfall = %+v, want 2 devices of 5, the held pod's among those used", short)
	}
}

// Once the kills have ended, another critical pod short of devices tried
// before the preemption's own pod waits for that pod's answer: the freed
// devices are its, and no second preemption kills more.
func TestCritletDevicePreemptionEndedWaitsForItsPod(t *testing.T) {
	critletmetrics.Register()
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	k.end(true)
	admitted := critletmetrics.DevicePreemptions.WithLabelValues("admitted")
	before, _ := testutil.GetCounterMetricValue(admitted)
	second := critletPod("second", "500m", 2, 2000001000)
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 1 {
		t.Fatalf("another critical pod before the preemption's own: %+v after %d preemptions, want held after 1", res, k.calls)
	}
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); !res.Admit {
		t.Fatalf("the preemption's own pod: %+v, want admitted on its victims' devices", res)
	}
	if after, _ := testutil.GetCounterMetricValue(admitted); after != before+1 || w.flight != nil {
		t.Errorf("admitted counted %v then %v (in flight: %v), want once and nothing in flight", before, after, w.flight != nil)
	}
}

// While one preemption is under way, a critical pod short of devices of
// another resource waits too: one preemption at a time, so two never
// choose the same pods (c holds a gpu and the nic).
func TestCritletDevicePreemptionOneAtATimeAcrossResources(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	n.nicHolder = "c"
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	nicUser := critletPod("nic-user", "100m", 0, 2000001000)
	one := resource.MustParse("1")
	nicUser.Spec.Containers[0].Resources.Requests[critletNIC], nicUser.Spec.Containers[0].Resources.Limits[critletNIC] = one, one
	if res := w.Admit(ctx, critletAdd(nicUser, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 1 {
		t.Fatalf("a critical pod short of the nic during a gpu preemption: %+v after %d preemptions, want held after 1", res, k.calls)
	}
	k.end(true)
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); !res.Admit {
		t.Fatalf("the gpu preemption's pod: %+v, want admitted", res)
	}
	k.choose = []types.UID{"c"}
	if res := w.Admit(ctx, critletAdd(nicUser, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 2 {
		t.Fatalf("the nic's pod once the gpu preemption was answered: %+v after %d preemptions, want its own", res, k.calls)
	}
	if short := critletShortOf(t, k.got); len(short) != 1 || short[critletNIC].Requested != 1 {
		t.Errorf("nic preemption's shortfall %+v, want one nic", short)
	}
}

// A static pod that static-pod-readmission retries is Failed from its
// earlier refusal, so not active: while it is queued, its preemption waits
// for it, and its own retry gets the answer.
func TestCritletDevicePreemptionWaitsForAStaticPodRetried(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	n.active[critical.UID] = false
	queued := true
	w.awaiting = func(uid types.UID) bool { return uid == critical.UID && queued }
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	k.end(true)
	other := critletPod("other", "500m", 1, 0)
	if res := w.Admit(ctx, critletAdd(other, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("another pod before the static pod's retry: %+v, want held", res)
	}
	if res := w.Admit(ctx, critletAdd(critical, n.activePods(pods)())); !res.Admit || k.calls != 1 {
		t.Fatalf("the static pod's retry: %+v after %d preemptions, want admitted after one", res, k.calls)
	}
	// Another preemption whose static pod left the queue (its manifest
	// removed) releases the devices once its kills have ended.
	second := critletPod("second", "500m", 2, 2000001000)
	k.choose = []types.UID{"c", "d"}
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 2 {
		t.Fatalf("%+v after %d preemptions, want its own", res, k.calls)
	}
	w.awaiting = func(types.UID) bool { return false }
	k.end(true)
	if res := w.Admit(ctx, critletAdd(other, n.activePods(pods)())); !res.Admit || w.flight != nil {
		t.Fatalf("once the kills ended for a pod no longer awaited: %+v (in flight %v), want admitted", res, w.flight != nil)
	}
}

// A preemption whose pod goes (deleted while held) keeps the devices it
// frees until its kills have ended: its victims are still terminating,
// and another preemption would weigh them again.
func TestCritletDevicePreemptionOfAPodGoneWaitsForItsKills(t *testing.T) {
	ctx := context.Background()
	n, pods, critical, k, w := critletSetup("500m")
	k.choose = []types.UID{"a", "b"}
	if res := w.Admit(ctx, critletAdd(critical, pods)); res.Reason != CritletReasonPreemptingForDevices {
		t.Fatalf("%+v, want held", res)
	}
	n.active[critical.UID] = false
	second := critletPod("second", "500m", 2, 2000001000)
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); res.Reason != CritletReasonPreemptingForDevices || k.calls != 1 {
		t.Fatalf("another critical pod while the gone pod's victims terminate: %+v after %d preemptions, want held after 1", res, k.calls)
	}
	k.end(true)
	if res := w.Admit(ctx, critletAdd(second, n.activePods(pods)())); !res.Admit || w.flight != nil {
		t.Fatalf("once the kills ended: %+v, want admitted on the freed devices", res)
	}
}
