// Package preemption admits critical pods that do not fit by preempting
// other pods. It replaces the stock kubelet's package of the same path with
// the same API: the kubelet's NewMainKubelet builds the handler unchanged.
// Victims are chosen by the pure package victims; settings come from package
// options.
package preemption

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/kubelet/preemption/options"
	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
)

// CriticalPodAdmissionHandler is a lifecycle.AdmissionFailureHandler. When a
// critical pod fails admission only for lack of resources, it preempts pods
// whose requests cover the shortfall and lets the critical pod in.
type CriticalPodAdmissionHandler struct {
	getPodsFunc eviction.ActivePodsFunc
	killPodFunc eviction.KillPodFunc
	recorder    record.EventRecorder
	opts        options.Options
}

var _ lifecycle.AdmissionFailureHandler = &CriticalPodAdmissionHandler{}

// NewCriticalPodAdmissionHandler returns a handler that lists candidate pods
// with getPodsFunc, preempts them with killPodFunc and records events with
// recorder, under the settings published with options.Set.
func NewCriticalPodAdmissionHandler(getPodsFunc eviction.ActivePodsFunc, killPodFunc eviction.KillPodFunc, recorder record.EventRecorder) *CriticalPodAdmissionHandler {
	opts := options.Current()
	if err := opts.Validate(); err != nil {
		// Settings are validated when parsed; this is a safety net only.
		klog.Background().Error(err, "Invalid critical-pod admission settings, using the defaults")
		opts = options.Defaults()
	}
	registerMetrics()
	klog.Background().Info("critlet critical-pod admission handler installed",
		"policy", opts.Policy, "parallelism", opts.Parallelism, "maxReplans", opts.MaxReplans, "killTimeout", opts.KillTimeout)
	return newHandler(getPodsFunc, killPodFunc, recorder, opts)
}

func newHandler(getPodsFunc eviction.ActivePodsFunc, killPodFunc eviction.KillPodFunc, recorder record.EventRecorder, opts options.Options) *CriticalPodAdmissionHandler {
	return &CriticalPodAdmissionHandler{getPodsFunc: getPodsFunc, killPodFunc: killPodFunc, recorder: recorder, opts: opts}
}

// HandleAdmissionFailure is called with the reasons admitPod was refused.
// For a critical pod refused only for insufficient resources it preempts
// pods and returns no reasons, so the pod is admitted; otherwise it returns
// the reasons that still stand.
func (c *CriticalPodAdmissionHandler) HandleAdmissionFailure(ctx context.Context, admitPod *v1.Pod, failureReasons []lifecycle.PredicateFailureReason, operation lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	if !kubetypes.IsCriticalPod(admitPod) {
		return failureReasons, nil
	}
	start := time.Now()
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
	if err := c.preempt(ctx, start, admitPod, reqs); err != nil {
		return nil, err
	}
	return nil, nil
}

// preempt frees reqs for admitPod. When no set of pods can cover reqs, or
// the input is malformed, it kills nothing and returns an error. Otherwise
// it terminates the chosen victims and, for those that fail to terminate,
// chooses further victims for what is still missing, at most MaxReplans
// times; then the pod is admitted, as the stock kubelet admits it after
// failed kills.
func (c *CriticalPodAdmissionHandler) preempt(ctx context.Context, start time.Time, admitPod *v1.Pod, reqs []victims.Requirement) error {
	logger := klog.FromContext(ctx)
	policy := string(c.opts.Policy)
	pods, cands, err := candidates(admitPod, c.getPodsFunc(), reqs)
	if err != nil {
		return c.refuse(admitPod, err)
	}
	selecting := time.Now()
	plan, err := victims.Select(c.opts.Policy, reqs, cands)
	selection := time.Since(selecting)
	if err != nil {
		selectionDuration.WithLabelValues(policy).Observe(selection.Seconds())
		return c.refuse(admitPod, err)
	}

	a := &admission{handler: c, logger: logger, admitPod: admitPod, reqs: reqs}
	if len(reqs) > 0 {
		a.signal = reqs[0].Resource
	}
	if logger.V(2).Enabled() {
		a.need = victims.FormatRequirements(reqs)
	}
	var freed []int
	tried := make([]bool, len(cands))
	rest := reqs
	for round := 0; ; round++ {
		victimPods := make([]*v1.Pod, len(plan))
		for k, i := range plan {
			victimPods[k] = pods[i]
			tried[i] = true
		}
		errs := a.terminate(ctx, victimPods)
		for k, i := range plan {
			if errs[k] == nil {
				freed = append(freed, i)
			} else {
				a.failed = append(a.failed, failure{pods[i], errs[k]})
			}
		}
		a.victims = append(a.victims, victimPods...)
		rest = victims.Remaining(reqs, cands, freed)
		if victims.Met(rest) || round == c.opts.MaxReplans {
			break
		}
		// Choose further victims for what the failed ones did not free, never
		// a pod already tried in this admission.
		untried, sub := untriedCandidates(cands, tried)
		selecting = time.Now()
		next, err := victims.Select(c.opts.Policy, rest, sub)
		selection += time.Since(selecting)
		if err != nil {
			logger.Info("Cannot re-plan critical-pod preemption", "requestingPod", klog.KObj(admitPod), "err", err)
			break
		}
		replans.WithLabelValues(policy).Inc()
		a.replans++
		logger.Info("Re-planning critical-pod preemption after failed terminations", "requestingPod", klog.KObj(admitPod),
			"failed", len(a.failed), "shortfall", victims.FormatRequirements(rest), "round", round+1)
		plan = plan[:0]
		for _, k := range next {
			plan = append(plan, untried[k])
		}
	}
	selectionDuration.WithLabelValues(policy).Observe(selection.Seconds())
	victimsPerAdmission.WithLabelValues(policy).Observe(float64(len(a.victims)))
	elapsed := time.Since(start)
	admissionDuration.WithLabelValues(policy).Observe(elapsed.Seconds())
	a.report(rest, elapsed)
	return nil
}

// untriedCandidates returns the candidates not yet tried, and their indexes
// in cands.
func untriedCandidates(cands []victims.Candidate, tried []bool) ([]int, []victims.Candidate) {
	var idx []int
	var sub []victims.Candidate
	for i, t := range tried {
		if !t {
			idx = append(idx, i)
			sub = append(sub, cands[i])
		}
	}
	return idx, sub
}

// refuse records why admitPod cannot be admitted and returns the error the
// kubelet puts in the pod's status, worded as the stock kubelet's.
func (c *CriticalPodAdmissionHandler) refuse(admitPod *v1.Pod, err error) error {
	c.recorder.Eventf(admitPod, v1.EventTypeWarning, reasonPreemptionImpossible,
		"Preempting pods cannot make room (policy %s): %v", c.opts.Policy, err)
	return fmt.Errorf("preemption: error finding a set of pods to preempt: %w", err)
}
