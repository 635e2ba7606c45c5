package preemption

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/metrics"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/termination"
)

// The texts the stock kubelet puts on victims; tooling matches on them.
const (
	victimMessage   = "Preempted in order to admit critical pod"
	conditionReason = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// forcedStopAllowance is how long, past a victim's grace period, the runtime
// may take to stop it by force before a kill timeout counts it as failed.
const forcedStopAllowance = 2 * time.Second

// terminate kills pods through the pod workers, each holding one of the
// admission's slots (at most Parallelism kills at once across its rounds),
// and returns each one's verdict: nil when it was stopped. Events and log
// lines are the stock kubelet's: the Preempting event and "Preempting pod to
// free up resources" as each kill starts, in plan order, then "Pod evicted
// successfully" or "Failed to evict pod" as it returns.
func (a *admission) terminate(ctx context.Context, pods []*v1.Pod) []error {
	c := a.handler
	policy := string(c.opts.Policy)
	return termination.Run(ctx, len(pods), a.slots, termination.Funcs{
		Wave: func(first, end int) { a.killsStart(pods[first:end]) },
		Start: func(i int) {
			pod := pods[i]
			if left, ok := a.resumedKill(pod); ok {
				// Signalled by the kubelet before this one, with its event.
				a.logger.Info("Resuming a victim's kill begun by an earlier kubelet", "pod", klog.KObj(pod), "podUID", pod.UID,
					"gracePeriodLeft", left, "requestingPod", klog.KObj(a.admitPod))
				a.recordPreempting(pod, true)
				return
			}
			a.recordPreempting(pod, false)
			a.logger.V(2).Info("Preempting pod to free up resources", "pod", klog.KObj(pod), "podUID", pod.UID,
				"insufficientResources", a.need, "requestingPod", klog.KObj(a.admitPod))
		},
		// Blocks until the pod's containers are stopped or the pod workers
		// give up; they keep retrying in later syncs either way.
		Kill:    func(i int) error { return a.kill(pods[i]) },
		Timeout: func(i int) time.Duration { return c.killWait(pods[i]) },
		Done: func(i int, verdict error) {
			pod := pods[i]
			switch {
			case verdict == nil:
				metrics.Preemptions.WithLabelValues(a.signal).Inc()
				a.logger.Info("Pod evicted successfully", "pod", klog.KObj(pod))
			case errors.Is(verdict, termination.ErrTimeout):
				critletmetrics.KillFailures.WithLabelValues(policy, "timeout").Inc()
				a.logger.Info("Stopped waiting for a victim; its resources no longer count as freed", "pod", klog.KObj(pod),
					"requestingPod", klog.KObj(a.admitPod), "killTimeout", c.killWait(pod))
			case errors.Is(verdict, termination.ErrCancelled):
				a.logger.Info("Stopped waiting for a victim: admission was cancelled", "pod", klog.KObj(pod),
					"requestingPod", klog.KObj(a.admitPod), "err", verdict)
			default:
				critletmetrics.KillFailures.WithLabelValues(policy, "error").Inc()
				a.logger.Error(verdict, "Failed to evict pod", "pod", klog.KObj(pod))
			}
		},
		// The victim was already counted as failed; only say how it ended.
		Late: func(i int, err error) {
			a.logger.V(2).Info("Victim finished terminating after admission stopped waiting", "pod", klog.KObj(pods[i]),
				"requestingPod", klog.KObj(a.admitPod), "err", err)
		},
	})
}

// kill asks the pod workers to kill pod and waits, as the stock kubelet
// does, for at most 1.5 times its grace period (at least 10s). A victim an
// earlier kubelet signalled is given only the grace it has left (the
// runtime then waits at least 2s before the forced stop). With
// --critical-preemption-outage-recovery, a wait that ends while the pod
// workers are retrying the kill because the runtime was unreachable is
// begun again, at most maxOutageWaits times: the victim still holds its
// resources, and the retry is under way.
func (a *admission) kill(pod *v1.Pod) error {
	c := a.handler
	var override *int64
	if left, ok := a.resumedKill(pod); ok {
		override = &left
	}
	kill := func() error { return c.killPodFunc(pod, true, override, preemptedStatus(pod)) }
	if !c.opts.On(patched.OutageRecovery) {
		return kill()
	}
	tracker := kubeletstate.Get().KillRetries
	seen := tracker.Retries(pod.UID)
	err := kill()
	for n := 0; err != nil && n < maxOutageWaits; n++ {
		retries := tracker.Retries(pod.UID)
		if retries == seen {
			break
		}
		critletmetrics.OutageWaits.Inc()
		a.logger.Info("Waiting on for a victim whose kill is being retried after the container runtime was unreachable", "pod", klog.KObj(pod),
			"retries", retries-seen, "requestingPod", klog.KObj(a.admitPod), "err", err)
		seen = retries
		err = kill()
	}
	return err
}

// maxOutageWaits bounds how many more times admission waits for one victim
// whose kill is retried through a runtime outage.
const maxOutageWaits = 3

// killWait is how long admission waits for pod to terminate: unbounded (as
// long as the pod workers wait) unless KillTimeout is set, and never less
// than the pod's grace period plus forcedStopAllowance, so that a victim
// merely taking its grace period is never counted as failed.
func (c *CriticalPodAdmissionHandler) killWait(pod *v1.Pod) time.Duration {
	if c.opts.KillTimeout <= 0 {
		return 0
	}
	var grace time.Duration
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil && *s > 0 {
		grace = time.Duration(*s) * time.Second
	}
	return max(c.opts.KillTimeout, grace+forcedStopAllowance)
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
