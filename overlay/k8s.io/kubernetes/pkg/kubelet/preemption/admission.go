package preemption

import (
	"context"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/termination"
	"github.com/critlet/critlet/pkg/victims"
)

// admission is one critical pod's preemption, across its rounds.
type admission struct {
	handler  *CriticalPodAdmissionHandler
	logger   klog.Logger
	admitPod *v1.Pod
	reqs     []victims.Requirement
	signal   string // label of kubelet_preemptions: the first shortfall
	need     string // reqs as the stock kubelet logs them, when verbose
	// slots bound the kills in flight across all rounds, the late ones of
	// victims given up on included.
	slots termination.Slots

	// pods and cands are the candidates, as planning lists them.
	pods  []*v1.Pod
	cands []victims.Candidate
	// selection is the time spent choosing, across rounds.
	selection time.Duration
	// held: the critical pod is held while the victims terminate
	// (PreemptForDevices), not admitted once they have.
	held bool

	victims []*v1.Pod
	failed  []failure
	replans int
	// fewest: a device shortfall, whose victims are chosen with full ties
	// broken for the fewest (choose).
	fewest bool

	// With --critical-preemption-resume: where the preemption is recorded,
	// the record, and the victims a previous kubelet had already signalled.
	store   *checkpoint.Store
	record  checkpoint.Preemption
	resumed map[types.UID]checkpoint.Victim
}

type failure struct {
	pod *v1.Pod
	err error
}

// admit frees reqs for admitPod. When no set of pods can cover reqs, or the
// input is malformed, it kills nothing and returns an error. Otherwise it
// terminates the chosen victims (run) and the pod is admitted, as the
// stock kubelet admits it after failed kills. held, when not nil (a device
// shortfall), credits pods with the devices they hold
// (planning.CandidatesHolding) and breaks ties for the fewest victims
// (victims.SelectFewest).
func (c *CriticalPodAdmissionHandler) admit(ctx context.Context, start time.Time, admitPod *v1.Pod, reqs []victims.Requirement, held planning.HeldDevices) error {
	a, plan, err := c.plan(ctx, admitPod, c.getPodsFunc(), reqs, held)
	if err != nil {
		return err
	}
	a.run(ctx, start, plan)
	return nil
}

// plan chooses the first round's victims among pods for reqs, or returns
// the refusal when none can cover them. It kills nothing.
func (c *CriticalPodAdmissionHandler) plan(ctx context.Context, admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement, held planning.HeldDevices) (*admission, []int, error) {
	// A pod the kubelet holds unadmitted (critlet's device patches) is
	// active but holds nothing: killing it frees nothing. With the
	// settings off none is held.
	unadmitted := kubeletstate.Get().Held
	pods = slices.DeleteFunc(slices.Clone(pods), func(p *v1.Pod) bool { return unadmitted(p.UID) })
	pods, cands, err := planning.CandidatesHolding(admitPod, pods, reqs, held)
	if err != nil {
		return nil, nil, c.refuse(admitPod, err)
	}
	a := &admission{handler: c, logger: klog.FromContext(ctx), admitPod: admitPod, reqs: reqs,
		slots: termination.NewSlots(c.opts.Parallelism), fewest: held != nil, pods: pods, cands: cands}
	selecting := time.Now()
	plan, err := a.resumeOrSelect(pods, cands)
	a.selection = time.Since(selecting)
	if err != nil {
		critletmetrics.SelectionDuration.WithLabelValues(string(c.opts.Policy)).Observe(a.selection.Seconds())
		return nil, nil, c.refuse(admitPod, err)
	}
	if len(reqs) > 0 {
		a.signal = reqs[0].Resource
	}
	if a.logger.V(2).Enabled() {
		a.need = victims.FormatRequirements(reqs)
	}
	return a, plan, nil
}

// run terminates the victims of plan and, for those that fail to
// terminate, chooses further victims for what is still missing, at most
// MaxReplans times and never once ctx is done. It reports whether the
// victims terminated free all of a.reqs.
func (a *admission) run(ctx context.Context, start time.Time, plan []int) bool {
	c := a.handler
	policy := string(c.opts.Policy)
	pods, cands, reqs := a.pods, a.cands, a.reqs
	var freed []int
	tried := make([]bool, len(cands))
	rest := reqs
	for round := 0; ; round++ {
		victimPods := make([]*v1.Pod, len(plan))
		for k, i := range plan {
			victimPods[k] = pods[i]
			tried[i] = true
		}
		a.recordVictims(victimPods)
		verdicts := a.terminate(ctx, victimPods)
		for k, i := range plan {
			if verdicts[k] == nil {
				freed = append(freed, i)
			} else {
				a.failed = append(a.failed, failure{pods[i], verdicts[k]})
			}
		}
		a.victims = append(a.victims, victimPods...)
		rest = victims.Remaining(reqs, cands, freed)
		if victims.Met(rest) || round == c.opts.MaxReplans || ctx.Err() != nil {
			break
		}
		// Choose further victims for what the failed ones did not free, never
		// a pod already tried in this admission.
		untried, sub := untriedCandidates(cands, tried)
		selecting := time.Now()
		next, err := a.choose(c.opts.Policy, rest, sub)
		a.selection += time.Since(selecting)
		if err != nil {
			a.logger.Info("Cannot re-plan critical-pod preemption", "requestingPod", klog.KObj(a.admitPod), "err", err)
			break
		}
		critletmetrics.Replans.WithLabelValues(policy).Inc()
		a.replans++
		a.logger.Info("Re-planning critical-pod preemption after failed terminations", "requestingPod", klog.KObj(a.admitPod),
			"failed", len(a.failed), "shortfall", victims.FormatRequirements(rest), "round", round+1)
		plan = plan[:0]
		for _, k := range next {
			plan = append(plan, untried[k])
		}
	}
	a.finish(ctx, rest)
	critletmetrics.SelectionDuration.WithLabelValues(policy).Observe(a.selection.Seconds())
	critletmetrics.VictimsPerAdmission.WithLabelValues(policy).Observe(float64(len(a.victims)))
	elapsed := time.Since(start)
	critletmetrics.AdmissionDuration.WithLabelValues(policy).Observe(elapsed.Seconds())
	a.report(rest, elapsed)
	return victims.Met(rest)
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

// choose selects victims: upstream's rule, with full ties broken for the
// fewest victims for a device shortfall. Both are called directly: the
// build's machine-code proof follows direct calls only.
func (a *admission) choose(policy victims.Policy, reqs []victims.Requirement, cands []victims.Candidate) ([]int, error) {
	if a.fewest {
		return victims.SelectFewest(policy, reqs, cands)
	}
	return victims.Select(policy, reqs, cands)
}
