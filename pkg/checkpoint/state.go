package checkpoint

import (
	"errors"
	"fmt"
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

// ErrStale is a preemption past the time a kubelet could usefully resume it.
var ErrStale = errors.New("stale")

// ErrUntrusted is a preemption whose times or grace periods no kubelet
// writes: damaged, forged, or written before the clock was stepped back.
var ErrUntrusted = errors.New("not a record a kubelet writes")

// Stale reports whether p can no longer be resumed usefully at now.
func (p Preemption) Stale(now time.Time) bool {
	var longest int64
	for _, v := range p.Victims {
		longest = max(longest, v.GracePeriodSeconds)
	}
	return now.After(p.Started.Add(seconds(longest)).Add(staleAfter))
}

// Resumable returns nil when a kubelet may resume p at now, else why not
// (wrapping ErrStale or ErrUntrusted). A kubelet writes started ≤
// killStarted ≤ the time it writes, and no negative grace; a record that
// breaks this is dropped whole, not mended: its times are what set each
// victim's grace and the record's lifetime, and one impossible time means
// none of them can be relied on (a killStarted in the past would cut a
// victim's grace short, a started in the future would keep the record from
// going stale). Dropping it makes the kubelet choose afresh, as the stock
// kubelet does.
func (p Preemption) Resumable(now time.Time) error {
	if p.Stale(now) {
		return fmt.Errorf("%w: began %s", ErrStale, p.Started.Format(time.RFC3339))
	}
	if p.Started.After(now) {
		return fmt.Errorf("%w: began %s, later than now (%s)", ErrUntrusted, p.Started.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	for _, v := range p.Victims {
		switch {
		case v.GracePeriodSeconds < 0:
			return fmt.Errorf("%w: victim %s has a negative grace period (%d)", ErrUntrusted, v.UID, v.GracePeriodSeconds)
		case v.KillStarted.IsZero():
		case v.KillStarted.Before(p.Started):
			return fmt.Errorf("%w: victim %s's kill began %s, before the preemption (%s)", ErrUntrusted, v.UID,
				v.KillStarted.Format(time.RFC3339Nano), p.Started.Format(time.RFC3339Nano))
		case v.KillStarted.After(now):
			return fmt.Errorf("%w: victim %s's kill began %s, later than now (%s)", ErrUntrusted, v.UID,
				v.KillStarted.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// Remaining returns how much of v's grace period is left at now, in whole
// seconds rounded up, and whether its kill had started. A victim whose kill
// never started keeps its whole grace period; none is given more: a clock
// stepped back since the kill began would otherwise turn the time it moved
// into grace, which the kubelet's sync loop then waits out.
func (v Victim) Remaining(now time.Time) (int64, bool) {
	grace := max(v.GracePeriodSeconds, 0)
	if v.KillStarted.IsZero() {
		return grace, false
	}
	left := v.KillStarted.Add(seconds(grace)).Sub(now)
	if left <= 0 {
		return 0, true
	}
	return min(int64(math.Ceil(left.Seconds())), grace), true
}

// seconds converts a grace period in seconds to a Duration, saturating
// rather than wrapping (negative) past the longest Duration, 292 years.
func seconds(n int64) time.Duration {
	const most = int64(math.MaxInt64 / time.Second)
	return time.Duration(min(n, most)) * time.Second
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
