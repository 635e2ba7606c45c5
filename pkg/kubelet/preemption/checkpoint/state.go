package checkpoint

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Victim is one pod chosen to make room.
type Victim struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	// GracePeriodSeconds is the grace the kill was given.
	GracePeriodSeconds int64 `json:"gracePeriodSeconds"`
	// KillStarted is when its kill was asked for; zero until then.
	KillStarted time.Time `json:"killStarted,omitzero"`
}

// Preemption is one critical pod's preemption under way.
type Preemption struct {
	PodUID    types.UID `json:"podUID"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Started   time.Time `json:"started"`
	Victims   []Victim  `json:"victims"`
}

// staleAfter is how long past its longest grace period a preemption is kept
// with no kubelet finishing it: by then its victims are gone (the kubelet
// kills them by force once the grace has run out) and the record says
// nothing a restarted kubelet could use.
const staleAfter = 5 * time.Minute

// Stale reports whether p can no longer be resumed usefully at now.
func (p Preemption) Stale(now time.Time) bool {
	var longest int64
	for _, v := range p.Victims {
		longest = max(longest, v.GracePeriodSeconds)
	}
	return now.After(p.Started.Add(time.Duration(longest)*time.Second + staleAfter))
}

// Remaining returns how much of v's grace period is left at now, in whole
// seconds rounded up, and whether its kill had started. A victim whose kill
// never started keeps its whole grace period.
func (v Victim) Remaining(now time.Time) (int64, bool) {
	if v.KillStarted.IsZero() {
		return v.GracePeriodSeconds, false
	}
	left := v.KillStarted.Add(time.Duration(v.GracePeriodSeconds) * time.Second).Sub(now)
	if left <= 0 {
		return 0, true
	}
	return int64(math.Ceil(left.Seconds())), true
}

// State is the preemptions under way, in the order they began; at most one
// per critical pod.
type State []Preemption

// Find returns the preemption for the critical pod uid.
func (s State) Find(uid types.UID) (Preemption, bool) {
	for _, p := range s {
		if p.PodUID == uid {
			return p, true
		}
	}
	return Preemption{}, false
}

// With returns s with p in place of any earlier preemption for the same
// critical pod. s is not changed.
func (s State) With(p Preemption) State {
	out := s.Without(p.PodUID)
	return append(out, p)
}

// Without returns s less the preemption for uid. s is not changed.
func (s State) Without(uid types.UID) State {
	out := make(State, 0, len(s))
	for _, p := range s {
		if p.PodUID != uid {
			out = append(out, p)
		}
	}
	return out
}

// Started returns s with the kill of victim of uid's preemption started at
// at, unless it had started already (the first start is the one the victim
// was signalled at). s is not changed.
func (s State) Started(uid, victim types.UID, at time.Time) State {
	out := make(State, len(s))
	for i, p := range s {
		out[i] = p
		if p.PodUID != uid {
			continue
		}
		vs := make([]Victim, len(p.Victims))
		copy(vs, p.Victims)
		for k := range vs {
			if vs[k].UID == victim && vs[k].KillStarted.IsZero() {
				vs[k].KillStarted = at
			}
		}
		out[i].Victims = vs
	}
	return out
}

// Fresh returns s less the preemptions stale at now, and how many it
// dropped. s is not changed.
func (s State) Fresh(now time.Time) (State, int) {
	out := make(State, 0, len(s))
	for _, p := range s {
		if !p.Stale(now) {
			out = append(out, p)
		}
	}
	return out, len(s) - len(out)
}
