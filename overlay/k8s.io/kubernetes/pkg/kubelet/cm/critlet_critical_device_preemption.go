//go:build critlet_patch

package cm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	kubefeatures "k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/planning"
)

// CritletReasonPreemptingForDevices is the refusal of a critical pod whose
// victims are terminating: the kubelet holds the pod (no status, no start)
// and admits it again, through every admit handler, at each housekeeping.
const CritletReasonPreemptingForDevices = "PreemptingForDevices"

// CritletPreemptDevices is called by the line the critical-device-preemption
// patch appends in NewMainKubelet once the predicate handler has joined
// handlers; allocateAt is where the patch's other hook saw the container
// manager's allocate handler join them. With the patch's setting off it
// returns handlers as they are; on, the allocate handler is wrapped so a
// critical pod it refuses for lack of devices preempts their holders. A
// kubelet with the setting on whose handler chain is not as expected
// refuses to start rather than run without the patch it was asked for.
// kubeCfg names the node's resource-manager policies.
func CritletPreemptDevices(ctx context.Context, handlers []lifecycle.PodAdmitHandler, allocateAt int, kubeCfg *kubeletconfig.KubeletConfiguration,
	devices podresources.DevicesProvider, getNode func(context.Context, bool) (*v1.Node, error),
	pluginResources func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error,
	preempt critletDeviceShortfallHandler, activePods func() []*v1.Pod, awaiting func(types.UID) bool, recorder record.EventRecorder) []lifecycle.PodAdmitHandler {
	if !kubeletstate.Get().Settings.On(patched.CriticalDevicePreemption) {
		return handlers
	}
	if !utilfeature.DefaultFeatureGate.Enabled(kubefeatures.InPlacePodVerticalScaling) {
		// The kubelet holds a pod only where it passes over unallocated
		// pods' updates (locked on since 1.35).
		klog.FromContext(ctx).Error(nil, "Cannot install critlet's patch as set: it holds critical pods while their victims terminate, which needs the InPlacePodVerticalScaling feature gate", "patch", patched.CriticalDevicePreemption.Name)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	managers := planning.NodeManagers{Topology: kubeCfg.TopologyManagerPolicy, CPU: kubeCfg.CPUManagerPolicy, Memory: kubeCfg.MemoryManagerPolicy}
	if why := planning.DevicePreemptionUnsupported(managers, true); why != "" {
		klog.FromContext(ctx).Info("critlet's critical-device-preemption does not preempt for some pods on this node: those short of devices are refused as upstream refuses them",
			"patch", patched.CriticalDevicePreemption.Name, "why", why)
	}
	out, err := critletWrapAllocateHandler(handlers, allocateAt, func(inner lifecycle.PodAdmitHandler) lifecycle.PodAdmitHandler {
		return &critletDevicePreemption{
			inner:    inner,
			managers: managers,
			recorder: recorder,
			devices:  devices,
			probe: func(capture lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitHandler {
				return lifecycle.NewPredicateAdmitHandler(getNode, capture, pluginResources)
			},
			preempt:    preempt,
			activePods: activePods,
			awaiting:   awaiting,
			ctx:        ctx,
		}
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot install critlet's patch as set", "patch", patched.CriticalDevicePreemption.Name)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	return out
}

// critletWrapAllocateHandler returns a copy of handlers with the one at
// allocateAt, which must come before the last (the predicate handler),
// replaced by wrap of it.
func critletWrapAllocateHandler(handlers []lifecycle.PodAdmitHandler, allocateAt int, wrap func(lifecycle.PodAdmitHandler) lifecycle.PodAdmitHandler) ([]lifecycle.PodAdmitHandler, error) {
	if allocateAt < 0 || allocateAt >= len(handlers)-1 || handlers[allocateAt] == nil {
		return nil, fmt.Errorf("the container manager's allocate handler is not before the predicate handler (at %d of %d admit handlers)", allocateAt, len(handlers))
	}
	out := append([]lifecycle.PodAdmitHandler(nil), handlers...)
	out[allocateAt] = wrap(handlers[allocateAt])
	return out, nil
}

// critletDeviceShortfallHandler is critlet's critical-pod handler
// (pkg/kubelet/preemption), which weighs each pod by the devices it holds
// and kills without waiting, calling done once the kills have ended.
type critletDeviceShortfallHandler interface {
	PreemptForDevices(ctx context.Context, pod *v1.Pod, reasons []lifecycle.PredicateFailureReason, held planning.HeldDevices,
		exclude func(types.UID) bool, done func(freed bool, failed []types.UID)) (int, []lifecycle.PredicateFailureReason, error)
}

// critletDevicePreemption is the container manager's allocate handler
// with critical pods' device shortfalls preempted.
type critletDevicePreemption struct {
	inner lifecycle.PodAdmitHandler
	// managers are the node's resource-manager policies: preemption for
	// devices runs only where they cannot refuse the freed devices.
	managers planning.NodeManagers
	recorder record.EventRecorder
	devices  podresources.DevicesProvider
	// probe builds upstream's predicate handler around a failure handler,
	// so the native shortfall joins the devices' in one selection.
	probe      func(lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitHandler
	preempt    critletDeviceShortfallHandler
	activePods func() []*v1.Pod
	// awaiting reports a pod the kubelet will admit again (held, or a
	// static pod queued for re-admission): a preemption's pod, until it
	// has had its answer.
	awaiting func(types.UID) bool
	// ctx lives as long as the kubelet: the kills outlive the admission
	// that began them.
	ctx context.Context

	// flight is the preemption under way or ended and not yet answered,
	// set and read on the sync loop; its fields are written by the kills'
	// goroutine, under mu. One at a time: two never weigh the same pods.
	mu     sync.Mutex
	flight *critletFlight
	// failed are the victims whose kills failed, under mu (stuck).
	failed []types.UID
}

// critletFlight is one critical pod's device preemption.
type critletFlight struct {
	pod     *v1.Pod
	victims int
	started time.Time
	// resources are the device resources it frees.
	resources []v1.ResourceName
	// ended and freed are set once the kills have ended, freed when they
	// freed the whole shortfall.
	ended, freed bool
}

// critletReasonDevicePreemptionSkipped is the event on a critical pod short
// of devices on a node whose resource managers could refuse it again with
// the devices freed: nothing is killed.
const critletReasonDevicePreemptionSkipped = "DevicePreemptionSkipped"

// Admit allocates as upstream does. When that refuses a critical pod being
// added for too few free devices (the device manager's count refusal, or
// under restricted and single-numa-node the topology manager's) and
// devices of a device-plugin resource are short, it preempts, where the
// node's resource managers cannot refuse the freed devices, pods chosen
// from the devices and any native shortfall together, and refuses the pod
// with CritletReasonPreemptingForDevices: the kubelet holds it, and it is
// admitted here again, through every admit handler, while the victims
// terminate, so the sync loop never waits on their grace periods. Once
// their kills have ended, the next admission is the pod's answer:
// allocated, or upstream's refusal. Until then any other pod asking for
// the devices being freed, and any other critical pod short of devices,
// is held too. Anything else returns upstream's refusal, with what
// happened logged.
func (w *critletDevicePreemption) Admit(ctx context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	if attrs.Operation != lifecycle.AddOperation {
		return w.inner.Admit(ctx, attrs)
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(attrs.Pod), "podUID", attrs.Pod.UID)
	f, ended, freed := w.current()
	own := f != nil && f.pod.UID == attrs.Pod.UID
	if f != nil && ended && !own && !w.awaiting(f.pod.UID) {
		// Its pod will not be admitted again (deleted while held,
		// refused): nothing waits for the devices.
		w.flight, f = nil, nil
	}
	if f != nil && !own && critletRequestsAny(attrs.Pod, f.resources) {
		// The devices being freed are the preempting pod's until it has
		// had its answer: another pod asking for them waits, unallocated.
		return w.holding(f, attrs.Pod)
	}
	refused := w.inner.Admit(ctx, attrs)
	if own {
		if !ended {
			// Held until the kills end, even when allocated meanwhile
			// (others freed devices): the predicate after this handler
			// would weigh victims still terminating, and preempt them
			// again on the sync loop. The device manager keeps what it
			// allocated for the pod, active while held.
			return w.holding(f, attrs.Pod)
		}
		w.flight = nil
		return w.answer(logger, f, freed, refused)
	}
	if refused.Admit || !kubetypes.IsCriticalPod(attrs.Pod) {
		return refused
	}
	count := planning.DeviceCountRefusal(refused.Message)
	if !count && refused.Reason != topologymanager.ErrorTopologyAffinity {
		// Refused for something else (CPUs, memory, a plugin away): as
		// upstream.
		return refused
	}
	short, held, err := w.shortages(logger, attrs)
	if err != nil {
		logger.Info("Not preempting for devices: the pod's device request cannot be allocated as it is", "err", err)
		return refused
	}
	if len(short) == 0 {
		// Devices enough (a topology refusal among them, or the device
		// manager's view changed since its refusal): as upstream.
		return refused
	}
	if why := planning.DevicePreemptionUnsupported(w.managers, v1qos.GetPodQOS(attrs.Pod) == v1.PodQOSGuaranteed); why != "" {
		logger.Info("Not preempting for devices: no kill is known to help on this node", "why", why, "reason", refused.Reason, "message", refused.Message)
		w.recorder.Eventf(attrs.Pod, v1.EventTypeWarning, critletReasonDevicePreemptionSkipped, "Not preempting pods for devices: %s", why)
		critletmetrics.DevicePreemptions.WithLabelValues("unsupported_node").Inc()
		return refused
	}
	if !count {
		// A topology refusal on a node whose policy never refuses for
		// alignment: not one preemption answers.
		return refused
	}
	if f != nil {
		// One preemption at a time, so two never choose the same pods: it
		// weighs the node once the other has been answered.
		return w.holding(f, attrs.Pod)
	}
	reasons, ok := w.withNativeShortfall(ctx, attrs, short)
	if !ok {
		logger.Info("Not preempting for devices: the admission predicate refuses the pod for reasons preemption cannot fix")
		critletmetrics.DevicePreemptions.WithLabelValues("no_victims").Inc()
		return refused
	}
	logger.Info("Critical pod refused for devices; preempting their holders", "shortfall", critletDescribe(reasons))
	f = &critletFlight{pod: attrs.Pod, started: time.Now()}
	for _, s := range short {
		f.resources = append(f.resources, v1.ResourceName(s.Resource))
	}
	n, left, err := w.preempt.PreemptForDevices(w.ctx, attrs.Pod, reasons, held, w.stuck(), func(freed bool, failed []types.UID) {
		w.mu.Lock()
		defer w.mu.Unlock()
		f.ended, f.freed = true, freed
		w.failed = append(w.failed, failed...)
	})
	if err != nil || len(left) > 0 {
		logger.Info("No set of pods frees enough devices; refusing as upstream", "err", err, "left", critletDescribe(left))
		critletmetrics.DevicePreemptions.WithLabelValues("no_victims").Inc()
		return refused
	}
	f.victims = n
	w.flight = f
	return w.holding(f, attrs.Pod)
}

// stuck returns the test of a victim of an earlier device preemption
// whose kill failed and which is still active: killed again, it would
// free nothing sooner. Those no longer active are forgotten. O(active
// pods) once, then O(1) a pod.
func (w *critletDevicePreemption) stuck() func(types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failed) == 0 {
		return func(types.UID) bool { return false }
	}
	active := sets.New[types.UID]()
	for _, p := range w.activePods() {
		active.Insert(p.UID)
	}
	w.failed = slices.DeleteFunc(w.failed, func(u types.UID) bool { return !active.Has(u) })
	still := sets.New(w.failed...)
	return still.Has
}

// critletRequestsAny reports whether any container of pod asks for one of
// resources.
func critletRequestsAny(pod *v1.Pod, resources []v1.ResourceName) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, r := range resources {
				if _, ok := c.Resources.Limits[r]; ok {
					return true
				}
				if _, ok := c.Resources.Requests[r]; ok {
					return true
				}
			}
		}
	}
	return false
}

// current returns the preemption in flight, whether its kills ended and
// whether they freed the shortfall.
func (w *critletDevicePreemption) current() (f *critletFlight, ended, freed bool) {
	if w.flight == nil {
		return nil, false, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flight, w.flight.ended, w.flight.freed
}

// holding is the refusal that has the kubelet hold pod while f's victims
// terminate.
func (w *critletDevicePreemption) holding(f *critletFlight, pod *v1.Pod) lifecycle.PodAdmitResult {
	pods := fmt.Sprintf("the %d pods", f.victims)
	if f.victims == 1 {
		pods = "the pod"
	}
	msg := fmt.Sprintf("Waiting for %s preempted for its devices to terminate", pods)
	if f.pod.UID != pod.UID {
		msg = fmt.Sprintf("Waiting for %s preempted for the devices of %s to terminate", pods, klog.KObj(f.pod))
	}
	return lifecycle.PodAdmitResult{Reason: CritletReasonPreemptingForDevices, Message: msg}
}

// answer is the held pod's admission once f's kills have ended: res,
// allocated with the victims' devices, or upstream's refusal.
func (w *critletDevicePreemption) answer(logger klog.Logger, f *critletFlight, freed bool, res lifecycle.PodAdmitResult) lifecycle.PodAdmitResult {
	waited := time.Since(f.started).Round(time.Millisecond)
	switch {
	case res.Admit:
		logger.Info("Critical pod admitted after its device preemption", "victims", f.victims, "waited", waited)
		critletmetrics.DevicePreemptions.WithLabelValues("admitted").Inc()
	case !freed:
		logger.Info("Preempted pods did not all terminate; refusing as upstream", "victims", f.victims, "waited", waited, "reason", res.Reason, "message", res.Message)
		critletmetrics.DevicePreemptions.WithLabelValues("not_freed").Inc()
	default:
		// Enough devices were freed: something took them or refused for
		// another reason meanwhile (on the node configurations preemption
		// runs on, no alignment refuses them).
		logger.Info("Critical pod refused again after its device preemption", "reason", res.Reason, "message", res.Message, "waited", waited)
		critletmetrics.DevicePreemptions.WithLabelValues("refused").Inc()
	}
	return res
}

// shortages is what the device manager lacks to allocate attrs.Pod, by
// device-plugin resource, from its healthy devices and those the pod and
// the other active pods hold; and, for the resources short, how many of
// their healthy devices each other pod holds: what killing it frees.
func (w *critletDevicePreemption) shortages(logger klog.Logger, attrs *lifecycle.PodAdmitAttributes) ([]devicedemand.Shortage, planning.HeldDevices, error) {
	healthy := critletDeviceIDs(w.devices.GetAllocatableDevices(logger))
	held := map[string][]string{}
	// heldBy[pod][r]: the devices of r each pod holds, init and app
	// containers' together (an app container reuses an init container's).
	heldBy := map[types.UID]map[string]sets.Set[string]{}
	// own[container][r]: what the pod itself already holds, read once with
	// everyone else's.
	own := map[string]map[string]int64{}
	for i, p := range w.holders(attrs) {
		for _, name := range critletContainerNames(p) {
			for r, ids := range critletDeviceIDs(w.devices.GetDevices(string(p.UID), name)) {
				held[r] = append(held[r], ids...)
				if heldBy[p.UID] == nil {
					heldBy[p.UID] = map[string]sets.Set[string]{}
				}
				if heldBy[p.UID][r] == nil {
					heldBy[p.UID][r] = sets.New[string]()
				}
				heldBy[p.UID][r].Insert(ids...)
				if i == 0 {
					if own[name] == nil {
						own[name] = map[string]int64{}
					}
					own[name][r] = int64(len(ids))
				}
			}
		}
	}
	// What the device manager allocates: resources registered (healthy
	// devices) or allocated before.
	isDevice := func(r string) bool { return healthy[r] != nil || held[r] != nil }
	containers := devicedemand.Containers(attrs.Pod, isDevice, func(container string) map[string]int64 { return own[container] })
	need, err := devicedemand.Need(containers)
	if err != nil {
		return nil, nil, err
	}
	short := devicedemand.Shortages(need, healthy, held)
	usable := map[string]sets.Set[string]{}
	for _, s := range short {
		usable[s.Resource] = sets.New(healthy[s.Resource]...)
	}
	// An unhealthy device, or one whose ID the plugin no longer lists (a
	// re-registration, a MIG change), is no use to the critical pod.
	heldDevices := func(p *v1.Pod, r v1.ResourceName) (int64, bool) {
		ok := usable[string(r)]
		if ok == nil {
			return 0, false
		}
		return int64(heldBy[p.UID][string(r)].Intersection(ok).Len()), true
	}
	return short, heldDevices, nil
}

// holders is attrs.Pod, then every other pod that may hold devices: the
// other pods the handlers weigh (those allocated), and the active pods
// not among them, such as a pod device-readmission holds, whose devices
// checkpointed before a reboot the device manager keeps for it.
func (w *critletDevicePreemption) holders(attrs *lifecycle.PodAdmitAttributes) []*v1.Pod {
	seen := map[types.UID]bool{attrs.Pod.UID: true}
	out := []*v1.Pod{attrs.Pod}
	for _, p := range append(slices.Clone(attrs.OtherPods), w.activePods()...) {
		if !seen[p.UID] {
			seen[p.UID] = true
			out = append(out, p)
		}
	}
	return out
}

// withNativeShortfall runs upstream's predicate on attrs to learn what else
// the pod lacks, and returns it with the devices' shortfall in place of the
// predicate's view of those resources (the device manager, not the node
// status, decides what it can allocate). ok is false when the predicate
// refuses the pod for a reason preemption cannot fix.
func (w *critletDevicePreemption) withNativeShortfall(ctx context.Context, attrs *lifecycle.PodAdmitAttributes, short []devicedemand.Shortage) ([]lifecycle.PredicateFailureReason, bool) {
	capture := &critletCapturedFailures{}
	if res := w.probe(capture).Admit(ctx, attrs); !res.Admit && capture.reasons == nil {
		// Refused before any resource was weighed (OS, node info).
		return nil, false
	}
	for _, r := range capture.reasons {
		// Taints, node affinity, host ports: the critical-pod handler
		// would kill nothing for them either.
		if _, ok := r.(*lifecycle.InsufficientResourceError); !ok {
			return nil, false
		}
	}
	return planning.DeviceShortfall(capture.reasons, short), true
}

// critletDeviceIDs groups device IDs by resource, each once: the device
// manager lists a device on several NUMA nodes once per node.
func critletDeviceIDs(devs []*podresourcesapi.ContainerDevices) map[string][]string {
	out := map[string][]string{}
	seen := map[string]sets.Set[string]{}
	for _, d := range devs {
		r := d.GetResourceName()
		if seen[r] == nil {
			seen[r] = sets.New[string]()
		}
		for _, id := range d.GetDeviceIds() {
			if !seen[r].Has(id) {
				seen[r].Insert(id)
				out[r] = append(out[r], id)
			}
		}
	}
	return out
}

func critletContainerNames(p *v1.Pod) []string {
	names := make([]string, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	for _, c := range p.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

func critletDescribe(reasons []lifecycle.PredicateFailureReason) []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = r.GetReason()
	}
	return out
}

// critletCapturedFailures keeps the reasons the predicate would hand the
// critical-pod handler, and fixes nothing.
type critletCapturedFailures struct {
	reasons []lifecycle.PredicateFailureReason
}

func (c *critletCapturedFailures) HandleAdmissionFailure(_ context.Context, _ *v1.Pod, reasons []lifecycle.PredicateFailureReason, _ lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	c.reasons = reasons
	return reasons, nil
}
