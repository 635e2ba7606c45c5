package explain

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/victims"
)

// Input is what the node's admission would see.
type Input struct {
	Node *v1.Node
	// Pods are pods bound to the node, as the API lists them; Explain keeps
	// those the kubelet counts (ActivePods).
	Pods []*v1.Pod
	// Pod is the pod to admit, its priority already resolved.
	Pod *v1.Pod
	// Static marks Pod as a static pod: critical whatever its priority.
	Static bool
	// Policies to plan with, in order; at least one.
	Policies []victims.Policy
	// DevicePreemption: the kubelet runs with --critical-preemption-devices,
	// so a critical pod short of devices preempts their holders; without
	// it the allocate handler refuses the pod, as the stock kubelet does.
	DevicePreemption bool
	// NotDevices names extended resources the node advertises without a
	// device plugin; every other extended resource is taken for a device
	// plugin's.
	NotDevices []string
}

// InputError is input Explain cannot work with: the command reports it as
// bad input.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return &InputError{fmt.Sprintf(format, args...)}
}

// Explain runs the kubelet's admission predicate for in.Pod on in.Node
// beside the node's active pods and, where the pod lacks only resources,
// plans the preemption under each policy.
func Explain(ctx context.Context, in Input) (*Explanation, error) {
	if in.Node == nil || in.Pod == nil {
		return nil, inputErrorf("explain: a node and a pod are required")
	}
	if len(in.Policies) == 0 {
		return nil, inputErrorf("explain: no policy to plan with")
	}
	pod := in.Pod.DeepCopy()
	if pod.Namespace == "" {
		pod.Namespace = v1.NamespaceDefault
	}
	if in.Static {
		// How the kubelet marks a pod read from its manifest directory.
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[kubetypes.ConfigSourceAnnotationKey] = kubetypes.FileSource
	}
	if !kubetypes.IsCriticalPod(pod) {
		return nil, inputErrorf("pod %s is not critical: priority %d is below %d and it is not static (--static); the kubelet preempts only for critical pods",
			klog.KObj(pod), priorityOf(pod), scheduling.SystemCriticalPriority)
	}
	active := ActivePods(in.Node.Name, in.Pods, pod)
	devices, err := newDeviceView(in.Node, active, in.NotDevices)
	if err != nil {
		return nil, err
	}
	ex := &Explanation{
		APIVersion: APIVersion, Kind: Kind, Node: in.Node.Name, ActivePods: len(active),
		Pod: PodRef{Namespace: pod.Namespace, Name: pod.Name, Priority: priorityOf(pod), PriorityClassName: pod.Spec.PriorityClassName, Static: in.Static},
	}
	attrs := &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: active, Operation: lifecycle.AddOperation}
	predicate := func(failures lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitResult {
		return lifecycle.NewPredicateAdmitHandler(
			func(context.Context, bool) (*v1.Node, error) { return in.Node, nil },
			failures,
			// The kubelet's hook adds device-plugin devices that are
			// allocated but missing from the node's allocatable; the API's
			// view of the node is all there is here.
			func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil },
		).Admit(ctx, attrs)
	}
	h := &planner{policies: in.Policies, active: active, devices: devices}
	// The container manager's allocate handler comes before the predicate.
	refused, short, err := devices.allocate(pod)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return explainDeviceRefusal(ctx, ex, pod, in.DevicePreemption, *refused, short, predicate, h)
	}
	res := predicate(h)
	if h.err != nil {
		return nil, h.err
	}
	ex.Shortfall = h.shortfall
	ex.Policies = h.plans
	switch {
	case !h.called && res.Admit:
		ex.Verdict = Fits
	case res.Admit:
		ex.Verdict = AdmittedAfterPreemption
		ex.Message = h.message
	default:
		ex.Verdict, ex.Reason, ex.Message = Rejected, res.Reason, res.Message
	}
	return ex, nil
}

// explainDeviceRefusal completes ex for a pod the allocate handler refuses:
// rejected with its refusal, unless devicePreemption finds victims for the
// devices short together with what the predicate says the pod lacks, as
// the critical-preemption-devices patch does.
func explainDeviceRefusal(ctx context.Context, ex *Explanation, pod *v1.Pod, devicePreemption bool, refused lifecycle.PodAdmitResult, short []devicedemand.Shortage,
	predicate func(lifecycle.AdmissionFailureHandler) lifecycle.PodAdmitResult, h *planner) (*Explanation, error) {
	ex.Verdict, ex.Reason, ex.Message = Rejected, refused.Reason, refused.Message
	for _, s := range short {
		ex.Shortfall = append(ex.Shortfall, Shortage{Resource: s.Resource, Device: true, Missing: s.Missing(), Requested: s.Requested, Used: s.Used, Capacity: s.Capacity})
	}
	if !devicePreemption || len(short) == 0 {
		return ex, nil
	}
	capture := &capturedFailures{}
	if res := predicate(capture); !res.Admit && capture.reasons == nil {
		// Refused before any resource was weighed.
		return ex, nil
	}
	for _, r := range capture.reasons {
		if _, ok := r.(*lifecycle.InsufficientResourceError); !ok {
			// A reason preemption cannot fix: the patch preempts nothing.
			return ex, nil
		}
	}
	h.forDevices = true
	_, err := h.HandleAdmissionFailure(ctx, pod, planning.DeviceShortfall(capture.reasons, short), lifecycle.AddOperation)
	if h.err != nil {
		return nil, h.err
	}
	ex.Shortfall, ex.Policies = h.shortfall, h.plans
	for i := range ex.Shortfall {
		for _, s := range short {
			if s.Resource == ex.Shortfall[i].Resource {
				ex.Shortfall[i].Device = true
			}
		}
	}
	if err == nil {
		ex.Verdict, ex.Reason, ex.Message = AdmittedAfterPreemption, "", h.message
	}
	// Else no set of pods frees enough: the patch refuses as upstream.
	return ex, nil
}

// capturedFailures keeps the reasons the predicate would hand the
// critical-pod handler, and fixes nothing.
type capturedFailures struct {
	reasons []lifecycle.PredicateFailureReason
}

func (c *capturedFailures) HandleAdmissionFailure(_ context.Context, _ *v1.Pod, reasons []lifecycle.PredicateFailureReason, _ lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	c.reasons = reasons
	return reasons, nil
}

// planner stands in for the kubelet's admission failure handler: it makes
// the same decision as the critical-pod handler, with each policy, and
// preempts nothing.
type planner struct {
	policies []victims.Policy
	active   []*v1.Pod
	devices  deviceView
	// forDevices: planning for a device shortfall, as the
	// critical-device-preemption patch does (planning.PlanForDevices).
	forDevices bool

	called    bool
	shortfall []Shortage
	message   string
	plans     []PolicyPlan
	err       error
}

var _ lifecycle.AdmissionFailureHandler = &planner{}

func (p *planner) HandleAdmissionFailure(_ context.Context, admitPod *v1.Pod, reasons []lifecycle.PredicateFailureReason, _ lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	p.called = true
	for _, r := range reasons {
		if e, ok := r.(*lifecycle.InsufficientResourceError); ok {
			p.shortfall = append(p.shortfall, Shortage{Resource: string(e.ResourceName), Missing: e.GetInsufficientAmount(), Requested: e.Requested, Used: e.Used, Capacity: e.Capacity})
			if p.message == "" {
				p.message = e.Error()
			}
		}
	}
	reqs, other := planning.Shortfall(reasons)
	if len(other) > 0 {
		// As the handler: only shortfalls can be fixed by preemption.
		return other, nil
	}
	var first error
	for i, policy := range p.policies {
		choose := planning.Plan
		if p.forDevices {
			choose = planning.PlanForDevices
		}
		pods, err := choose(policy, admitPod, p.active, reqs)
		var input *victims.InputError
		if errors.As(err, &input) {
			p.err = inputErrorf("the node's pods cannot be planned with: %v", err)
			return reasons, nil
		}
		plan := PolicyPlan{Policy: policy, Verdict: AdmittedAfterPreemption, Victims: []Victim{}}
		if err != nil {
			plan.Verdict, plan.Error = Rejected, planning.Refusal(err).Error()
			if i == 0 {
				first = planning.Refusal(err)
			}
		} else {
			plan.Freed = map[string]int64{}
			for _, pod := range pods {
				plan.Victims = append(plan.Victims, victimOf(pod, p.devices))
				for _, r := range reqs {
					plan.Freed[r.Resource] += planning.Request(pod, v1.ResourceName(r.Resource))
				}
			}
		}
		p.plans = append(p.plans, plan)
	}
	// The first policy's outcome is admission's: no reasons admits the pod,
	// an error refuses it with the handler's message.
	return nil, first
}

func victimOf(pod *v1.Pod, devices deviceView) Victim {
	return Victim{
		Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
		QOS: v1qos.GetPodQOS(pod), Priority: priorityOf(pod),
		CPU: planning.Request(pod, v1.ResourceCPU), Memory: planning.Request(pod, v1.ResourceMemory),
		Devices: devices.deviceRequests(pod),
	}
}

func priorityOf(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// ActivePods returns the pods of pods that the kubelet on node counts at
// admission, in their given order: bound to the node, not in a terminal
// phase, not known to have terminated (deleted, with every container
// stopped), and not admitPod itself (same UID or same namespace and name:
// the pod being explained replaces it).
func ActivePods(node string, pods []*v1.Pod, admitPod *v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range pods {
		switch {
		case p.Spec.NodeName != node:
		case p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed:
		case p.DeletionTimestamp != nil && allStopped(p):
		case admitPod.UID != "" && p.UID == admitPod.UID:
		case p.Namespace == admitPod.Namespace && p.Name == admitPod.Name:
		default:
			out = append(out, p)
		}
	}
	return out
}

func allStopped(p *v1.Pod) bool {
	statuses := append(append([]v1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	if len(statuses) == 0 {
		return false
	}
	for _, s := range statuses {
		if s.State.Terminated == nil {
			return false
		}
	}
	return true
}
