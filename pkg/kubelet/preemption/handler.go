// Package preemption admits critical pods that do not fit by preempting
// other pods. It replaces the stock kubelet's package of the same path with
// the same API: the kubelet's NewMainKubelet builds the handler unchanged.
// Victims are chosen by the pure package victims.
package preemption

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/metrics"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
)

// The texts the stock kubelet puts on victims; tooling matches on them.
const (
	victimMessage   = "Preempted in order to admit critical pod"
	conditionReason = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// CriticalPodAdmissionHandler is a lifecycle.AdmissionFailureHandler. When a
// critical pod fails admission only for lack of resources, it preempts pods
// whose requests cover the shortfall and lets the critical pod in.
type CriticalPodAdmissionHandler struct {
	getPodsFunc eviction.ActivePodsFunc
	killPodFunc eviction.KillPodFunc
	recorder    record.EventRecorder
	policy      victims.Policy
}

var _ lifecycle.AdmissionFailureHandler = &CriticalPodAdmissionHandler{}

// NewCriticalPodAdmissionHandler returns a handler that lists candidate pods
// with getPodsFunc, preempts them with killPodFunc and records events with
// recorder.
func NewCriticalPodAdmissionHandler(getPodsFunc eviction.ActivePodsFunc, killPodFunc eviction.KillPodFunc, recorder record.EventRecorder) *CriticalPodAdmissionHandler {
	return &CriticalPodAdmissionHandler{
		getPodsFunc: getPodsFunc,
		killPodFunc: killPodFunc,
		recorder:    recorder,
		policy:      victims.PolicyUpstream,
	}
}

// HandleAdmissionFailure is called with the reasons admitPod was refused.
// For a critical pod refused only for insufficient resources it preempts
// pods and returns no reasons, so the pod is admitted; otherwise it returns
// the reasons that still stand.
func (c *CriticalPodAdmissionHandler) HandleAdmissionFailure(ctx context.Context, admitPod *v1.Pod, failureReasons []lifecycle.PredicateFailureReason, operation lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	if !kubetypes.IsCriticalPod(admitPod) {
		return failureReasons, nil
	}
	// With this gate the scheduler owns preemption for in-place resizes; the
	// kubelet defers the resize instead of preempting.
	if operation == lifecycle.ResizeOperation && utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScalingSchedulerPreemption) {
		return failureReasons, nil
	}
	var other []lifecycle.PredicateFailureReason
	var reqs []victims.Requirement
	for _, reason := range failureReasons {
		if r, ok := reason.(*lifecycle.InsufficientResourceError); ok {
			reqs = append(reqs, victims.Requirement{Resource: string(r.ResourceName), Quantity: r.GetInsufficientAmount()})
		} else {
			other = append(other, reason)
		}
	}
	if len(other) > 0 {
		// Only resource shortfalls can be fixed by preemption; report the rest.
		return other, nil
	}
	if err := c.preempt(ctx, admitPod, reqs); err != nil {
		return nil, err
	}
	return nil, nil
}

// preempt frees reqs for admitPod. It either kills a set of pods that covers
// reqs or, when no such set exists or the input is malformed, kills nothing
// and returns an error.
func (c *CriticalPodAdmissionHandler) preempt(ctx context.Context, admitPod *v1.Pod, reqs []victims.Requirement) error {
	logger := klog.FromContext(ctx)
	pods, cands, err := candidates(admitPod, c.getPodsFunc(), reqs)
	if err != nil {
		return fmt.Errorf("preemption: error finding a set of pods to preempt: %w", err)
	}
	plan, err := victims.Select(c.policy, reqs, cands)
	if err != nil {
		return fmt.Errorf("preemption: error finding a set of pods to preempt: %w", err)
	}
	signal := ""
	if len(reqs) > 0 {
		signal = reqs[0].Resource
	}
	verbose := logger.V(2)
	need := ""
	if verbose.Enabled() {
		need = victims.FormatRequirements(reqs)
	}
	for _, i := range plan {
		pod := pods[i]
		c.recorder.Eventf(pod, v1.EventTypeWarning, events.PreemptContainer, victimMessage)
		verbose.Info("Preempting pod to admit a critical pod", "pod", klog.KObj(pod), "podUID", pod.UID,
			"insufficientResources", need, "requestingPod", klog.KObj(admitPod), "policy", c.policy)
		// Blocks until the pod's containers are stopped.
		if err := c.killPodFunc(pod, true, nil, preemptedStatus(pod)); err != nil {
			// The pod workers keep retrying the kill in later syncs.
			logger.Error(err, "Failed to preempt pod", "pod", klog.KObj(pod), "requestingPod", klog.KObj(admitPod))
			continue
		}
		metrics.Preemptions.WithLabelValues(signal).Inc()
		logger.Info("Preempted pod", "pod", klog.KObj(pod), "requestingPod", klog.KObj(admitPod))
	}
	return nil
}

// preemptedStatus returns the status update the stock kubelet applies to a
// victim: failed, reason Preempting, and a DisruptionTarget condition.
func preemptedStatus(pod *v1.Pod) func(*v1.PodStatus) {
	return func(status *v1.PodStatus) {
		status.Phase = v1.PodFailed
		status.Reason = events.PreemptContainer
		status.Message = victimMessage
		podutil.UpdatePodCondition(status, &v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: podutil.CalculatePodConditionObservedGeneration(status, pod.Generation, v1.DisruptionTarget),
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonTerminationByKubelet,
			Message:            conditionReason,
		})
	}
}
