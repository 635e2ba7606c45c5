package preemption

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/victims"
)

// resumeOrSelect returns the first round's victims, as indexes into pods
// and cands. With --critical-preemption-resume and a preemption recorded
// for the critical pod by an earlier kubelet, the recorded victims still on
// the node whose kill had begun come first: they were signalled, and are
// killed with the grace they have left. Only a shortfall they do not cover
// is selected for, as ever, among the other pods (recorded victims never
// signalled included): a record promises no more kills than a fresh
// choice would make. Without such a record the victims are selected as
// ever.
func (a *admission) resumeOrSelect(pods []*v1.Pod, cands []victims.Candidate) ([]int, error) {
	c := a.handler
	if c.opts.On(patched.PreemptionResume) {
		a.store = kubeletstate.Get().Checkpoints
	}
	if a.store == nil {
		return a.choose(c.opts.Policy, a.reqs, cands)
	}
	prior, ok := a.store.Find(a.admitPod.UID)
	if !ok {
		return a.choose(c.opts.Policy, a.reqs, cands)
	}
	recorded := map[types.UID]checkpoint.Victim{}
	for _, v := range prior.Victims {
		recorded[v.UID] = v
	}
	var plan []int
	tried := make([]bool, len(cands))
	a.resumed = map[types.UID]checkpoint.Victim{}
	for i, p := range pods {
		if v, ok := recorded[p.UID]; ok && !v.KillStarted.IsZero() {
			plan = append(plan, i)
			tried[i] = true
			a.resumed[p.UID] = v
		}
	}
	if len(plan) == 0 {
		a.logger.Info("No victim an earlier kubelet recorded for this pod is still here signalled; choosing victims afresh", "requestingPod", klog.KObj(a.admitPod),
			"began", prior.Started, "recorded", len(prior.Victims))
		a.resumed = nil
		return a.choose(c.opts.Policy, a.reqs, cands)
	}
	rest := victims.Remaining(a.reqs, cands, plan)
	if !victims.Met(rest) {
		untried, sub := untriedCandidates(cands, tried)
		more, err := a.choose(c.opts.Policy, rest, sub)
		if err != nil {
			// The node changed under the record: choose afresh.
			a.logger.Info("The recorded victims no longer make room; choosing victims afresh", "requestingPod", klog.KObj(a.admitPod), "err", err)
			a.resumed = nil
			return a.choose(c.opts.Policy, a.reqs, cands)
		}
		for _, k := range more {
			plan = append(plan, untried[k])
		}
	}
	// The record goes on as it began, so it ages from its first kill.
	a.record = checkpoint.Preemption{PodUID: prior.PodUID, Namespace: prior.Namespace, Name: prior.Name, Started: prior.Started}
	a.logger.Info("Resuming the preemption an earlier kubelet began for this pod", "requestingPod", klog.KObj(a.admitPod),
		"began", prior.Started, "recorded", len(prior.Victims), "signalledStillHere", len(a.resumed), "victims", len(plan))
	critletmetrics.ResumedPreemptions.Inc()
	return plan, nil
}

// recordVictims adds pods, the next round's victims, to the record kept in
// memory; they reach the disk with the round's first wave of kills.
func (a *admission) recordVictims(pods []*v1.Pod) {
	if a.store == nil {
		return
	}
	if a.record.PodUID == "" {
		a.record = checkpoint.Preemption{PodUID: a.admitPod.UID, Namespace: a.admitPod.Namespace, Name: a.admitPod.Name, Started: time.Now()}
	}
	for _, p := range pods {
		v := checkpoint.Victim{UID: p.UID, Namespace: p.Namespace, Name: p.Name, GracePeriodSeconds: gracePeriodSeconds(p)}
		if prior, ok := a.resumed[p.UID]; ok {
			v = prior
		}
		a.record.Victims = append(a.record.Victims, v)
	}
}

// killsStart writes the record, with the kills of pods (victims starting
// together) begun now, in one write before any of them is killed. A failed
// write costs only the resumption after a crash: it is logged and the
// preemption goes on, as it would without the setting.
func (a *admission) killsStart(pods []*v1.Pod) {
	if a.store == nil {
		return
	}
	now := time.Now()
	for _, p := range pods {
		for k := range a.record.Victims {
			if v := &a.record.Victims[k]; v.UID == p.UID && v.KillStarted.IsZero() {
				v.KillStarted = now
			}
		}
	}
	if err := a.store.Record(a.record); err != nil {
		a.logger.Error(err, "Could not record the preemption's victims; a kubelet restarted before it ends would preempt anew", "requestingPod", klog.KObj(a.admitPod))
	}
}

// finish drops the record: the preemption is over, unless the kubelet is
// stopping (ctx done) with victims not yet stopped or room still short: the
// record is then what lets the next kubelet go on with the same preemption.
func (a *admission) finish(ctx context.Context, rest []victims.Requirement) {
	if a.store == nil || a.record.PodUID == "" {
		return
	}
	if ctx.Err() != nil && (len(a.failed) > 0 || !victims.Met(rest)) {
		a.logger.Info("Admission stopped with the preemption unfinished; its record is kept for the next kubelet", "requestingPod", klog.KObj(a.admitPod),
			"notStopped", len(a.failed), "err", context.Cause(ctx))
		return
	}
	if err := a.store.Finish(a.admitPod.UID); err != nil {
		a.logger.Error(err, "Could not clear the finished preemption from the checkpoint", "requestingPod", klog.KObj(a.admitPod))
	}
}

// resumedKill returns, for a victim an earlier kubelet already signalled,
// the grace period left to it; ok is false for any other victim.
func (a *admission) resumedKill(pod *v1.Pod) (left int64, ok bool) {
	v, found := a.resumed[pod.UID]
	if !found {
		return 0, false
	}
	left, ok = v.Remaining(time.Now())
	// Never more than the pod's own grace, whatever the record says.
	if own := gracePeriodSeconds(pod); own > 0 {
		left = min(left, own)
	}
	return left, ok
}

// gracePeriodSeconds is the grace the kubelet gives pod when it is killed
// without an override.
func gracePeriodSeconds(pod *v1.Pod) int64 {
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil && *s > 0 {
		return *s
	}
	return 0
}
