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
	ex := &Explanation{
		APIVersion: APIVersion, Kind: Kind, Node: in.Node.Name, ActivePods: len(active),
		Pod: PodRef{Namespace: pod.Namespace, Name: pod.Name, Priority: priorityOf(pod), PriorityClassName: pod.Spec.PriorityClassName, Static: in.Static},
	}
	h := &planner{policies: in.Policies, active: active}
	admit := lifecycle.NewPredicateAdmitHandler(
		func(context.Context, bool) (*v1.Node, error) { return in.Node, nil },
		h,
		// The kubelet's hook adds device-plugin devices that are allocated
		// but missing from the node's allocatable; the API's view of the
		// node is all there is here.
		func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil },
	)
	res := admit.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: active, Operation: lifecycle.AddOperation})
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

// planner stands in for the kubelet's admission failure handler: it makes
// the same decision as the critical-pod handler, with each policy, and
// preempts nothing.
type planner struct {
	policies []victims.Policy
	active   []*v1.Pod

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
		pods, err := planning.Plan(policy, admitPod, p.active, reqs)
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
				plan.Victims = append(plan.Victims, victimOf(pod))
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

func victimOf(pod *v1.Pod) Victim {
	return Victim{
		Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
		QOS: v1qos.GetPodQOS(pod), Priority: priorityOf(pod),
		CPU: planning.Request(pod, v1.ResourceCPU), Memory: planning.Request(pod, v1.ResourceMemory),
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
