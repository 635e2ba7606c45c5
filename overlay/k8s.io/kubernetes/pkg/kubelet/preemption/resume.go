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
// and cands: a fresh choice on today's pods, always, so a record never
// asks more kills than a fresh choice would. With
// --critical-preemption-resume and a preemption recorded for the critical
// pod by an earlier kubelet whose signalled victims are still here, that
// choice is, among those upstream's rule can make, one with the fewest
// victims, then the most the earlier kubelet had begun to kill. A
// signalled victim is killed, in this round or a re-planned one, with the
// grace it has left and no second event; one no round takes is spared,
// its earlier kill not carried on (whatever the signal did, its pod
// workers take it from there).
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
	// Every signalled victim still here is resumed if it is killed, in this
	// round or a later one: never a second event nor a whole new grace.
	signalled := make([]bool, len(pods))
	a.resumed = map[types.UID]checkpoint.Victim{}
	for i, p := range pods {
		if v, ok := recorded[p.UID]; ok && !v.KillStarted.IsZero() {
			signalled[i] = true
			a.resumed[p.UID] = v
		}
	}
	if len(a.resumed) == 0 {
		a.logger.Info("No victim an earlier kubelet recorded for this pod is still here signalled; choosing victims afresh", "requestingPod", klog.KObj(a.admitPod),
			"began", prior.Started, "recorded", len(prior.Victims))
		a.resumed = nil
		return a.choose(c.opts.Policy, a.reqs, cands)
	}
	// Among the choices upstream's rule makes in some order of the pods
	// (the kubelet's comes from a map), the fewest victims, then the most
	// already signalled: where pods are alike, the earlier kubelet's.
	plan, err := victims.SelectFewestPreferring(c.opts.Policy, a.reqs, cands, signalled)
	if err != nil {
		return nil, err
	}
	chosen := 0
	for _, i := range plan {
		if signalled[i] {
			chosen++
		}
	}
	// The record goes on as it began, so it ages from its first kill (a
	// signalled victim's kill began before any new record would).
	a.record = checkpoint.Preemption{PodUID: prior.PodUID, Namespace: prior.Namespace, Name: prior.Name, Started: prior.Started}
	a.logger.Info("Resuming the preemption an earlier kubelet began for this pod", "requestingPod", klog.KObj(a.admitPod),
		"began", prior.Started, "recorded", len(prior.Victims), "signalledStillHere", len(a.resumed), "signalledChosen", chosen, "victims", len(plan))
	if chosen > 0 {
		critletmetrics.ResumedPreemptions.Inc()
	}
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
