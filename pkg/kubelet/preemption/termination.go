package preemption

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/metrics"

	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
)

// The texts the stock kubelet puts on victims; tooling matches on them.
const (
	victimMessage   = "Preempted in order to admit critical pod"
	conditionReason = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// Event reasons on the critical pod, which the stock kubelet leaves without
// any.
const (
	reasonPreempted            = "PreemptedForAdmission"
	reasonPreemptionReplanned  = "PreemptionReplanned"
	reasonPreemptionIncomplete = "PreemptionIncomplete"
	reasonPreemptionImpossible = "PreemptionImpossible"
)

// errKillTimeout marks a victim admission stopped waiting for.
var errKillTimeout = errors.New("still terminating when the kill timeout expired")

// admission is the state of one critical pod's preemption across rounds.
type admission struct {
	handler  *CriticalPodAdmissionHandler
	logger   klog.Logger
	admitPod *v1.Pod
	reqs     []victims.Requirement
	signal   string // label of kubelet_preemptions: the first shortfall
	need     string // reqs as logged, when verbose

	victims []*v1.Pod
	failed  []failure
	replans int
}

type failure struct {
	pod *v1.Pod
	err error
}

// terminate kills pods, at most Parallelism at once, and returns each kill's
// error. With Parallelism 1 the kills run one after another, in order.
func (a *admission) terminate(ctx context.Context, pods []*v1.Pod) []error {
	errs := make([]error, len(pods))
	if a.handler.opts.Parallelism == 1 {
		for k, pod := range pods {
			errs[k] = a.terminateOne(ctx, pod)
		}
		return errs
	}
	slots := make(chan struct{}, a.handler.opts.Parallelism)
	var wg sync.WaitGroup
	for k, pod := range pods {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			errs[k] = a.terminateOne(ctx, pod)
		}()
	}
	wg.Wait()
	return errs
}

// terminateOne kills one victim through the pod workers, as the stock
// kubelet does, waiting at most KillTimeout when one is set.
func (a *admission) terminateOne(ctx context.Context, pod *v1.Pod) error {
	c := a.handler
	c.recorder.Eventf(pod, v1.EventTypeWarning, events.PreemptContainer, victimMessage)
	a.logger.V(2).Info("Preempting pod to admit a critical pod", "pod", klog.KObj(pod), "podUID", pod.UID,
		"insufficientResources", a.need, "requestingPod", klog.KObj(a.admitPod), "policy", c.opts.Policy)
	kill := func() error {
		// Blocks until the pod's containers are stopped or the pod workers
		// give up; they keep retrying in later syncs either way.
		err := c.killPodFunc(pod, true, nil, preemptedStatus(pod))
		if err != nil {
			killFailures.WithLabelValues(string(c.opts.Policy), "error").Inc()
			a.logger.Error(err, "Failed to preempt pod", "pod", klog.KObj(pod), "requestingPod", klog.KObj(a.admitPod))
			return err
		}
		metrics.Preemptions.WithLabelValues(a.signal).Inc()
		a.logger.Info("Preempted pod", "pod", klog.KObj(pod), "requestingPod", klog.KObj(a.admitPod))
		return nil
	}
	if c.opts.KillTimeout <= 0 {
		return kill()
	}
	done := make(chan error, 1)
	go func() { done <- kill() }()
	timer := time.NewTimer(c.opts.KillTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		killFailures.WithLabelValues(string(c.opts.Policy), "timeout").Inc()
		a.logger.Info("Stopped waiting for a victim; its resources no longer count as freed", "pod", klog.KObj(pod),
			"requestingPod", klog.KObj(a.admitPod), "killTimeout", c.opts.KillTimeout)
		return errKillTimeout
	case <-ctx.Done():
		return fmt.Errorf("waiting for pod %s to terminate: %w", klog.KObj(pod), ctx.Err())
	}
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

// report records one event on the critical pod saying what was preempted,
// for what, under which policy and how long it took; a warning when victims
// failed to terminate or the need was not met.
func (a *admission) report(rest []victims.Requirement, elapsed time.Duration) {
	c := a.handler
	if len(a.victims) == 0 && victims.Met(rest) {
		return // nothing was missing
	}
	took := elapsed.Round(time.Millisecond)
	what := fmt.Sprintf("preempted %s to free %s (policy %s) in %s", podList(a.victims), describe(a.reqs), c.opts.Policy, took)
	switch {
	case !victims.Met(rest):
		c.recorder.Eventf(a.admitPod, v1.EventTypeWarning, reasonPreemptionIncomplete,
			"Admitted with %s still missing after %d re-planning rounds: %s; %d failed to terminate: %s",
			describe(rest), a.replans, what, len(a.failed), failureList(a.failed))
	case len(a.failed) > 0:
		c.recorder.Eventf(a.admitPod, v1.EventTypeWarning, reasonPreemptionReplanned,
			"Re-planned %d times: %s; %d failed to terminate: %s", a.replans, what, len(a.failed), failureList(a.failed))
	default:
		c.recorder.Eventf(a.admitPod, v1.EventTypeNormal, reasonPreempted, "Admitted: %s", what)
	}
}

// listed bounds how many pods an event names; events are capped in size.
const listed = 10

func podList(pods []*v1.Pod) string {
	noun := "pods"
	if len(pods) == 1 {
		noun = "pod"
	}
	return fmt.Sprintf("%d %s (%s)", len(pods), noun, bounded(len(pods), ", ", func(k int) string { return klog.KObj(pods[k]).String() }))
}

func failureList(fs []failure) string {
	return bounded(len(fs), "; ", func(k int) string { return fmt.Sprintf("%s: %v", klog.KObj(fs[k].pod), fs[k].err) })
}

// bounded joins the first listed of n items and says how many it left out.
func bounded(n int, sep string, item func(int) string) string {
	parts := make([]string, 0, min(n, listed)+1)
	for k := 0; k < min(n, listed); k++ {
		parts = append(parts, item(k))
	}
	if n > listed {
		parts = append(parts, fmt.Sprintf("and %d more", n-listed))
	}
	return strings.Join(parts, sep)
}

// describe renders requirements in the units users write them in.
func describe(reqs []victims.Requirement) string {
	var parts []string
	for _, r := range reqs {
		if r.Quantity <= 0 {
			continue
		}
		var q *resource.Quantity
		switch v1.ResourceName(r.Resource) {
		case v1.ResourceCPU:
			q = resource.NewMilliQuantity(r.Quantity, resource.DecimalSI)
		case v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourceStorage:
			q = resource.NewQuantity(r.Quantity, resource.BinarySI)
		default:
			q = resource.NewQuantity(r.Quantity, resource.DecimalSI)
		}
		parts = append(parts, fmt.Sprintf("%s %s", r.Resource, q))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
