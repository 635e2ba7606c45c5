package checkpoint

import (
	"errors"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)

func TestRemaining(t *testing.T) {
	v := Victim{UID: "v", GracePeriodSeconds: 10}
	if left, started := v.Remaining(t0); left != 10 || started {
		t.Errorf("never started: %d, %v; want the whole grace, not started", left, started)
	}
	v.KillStarted = t0
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{{0, 10}, {3500 * time.Millisecond, 7}, {9 * time.Second, 1}, {9999 * time.Millisecond, 1}, {10 * time.Second, 0}, {time.Hour, 0}} {
		if left, started := v.Remaining(t0.Add(tc.at)); left != tc.want || !started {
			t.Errorf("%s after the kill: %d, %v; want %d, started", tc.at, left, started, tc.want)
		}
	}
}

func TestStateTransitionsLeaveTheOriginal(t *testing.T) {
	p := Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10}, {UID: "b", GracePeriodSeconds: 30}}}
	other := Preemption{PodUID: "other", Started: t0}
	s := State{}.With(other).With(p)
	again := s
	// With replaces, keeping one record per critical pod.
	if n := len(again.With(Preemption{PodUID: "crit", Started: t0})); n != 2 {
		t.Errorf("With a second record for the same pod: %d records, want 2", n)
	}
	if rest := again.Without("crit"); len(rest) != 1 || rest[0].PodUID != "other" || len(again) != 2 {
		t.Errorf("Without: %+v (from %d)", rest, len(again))
	}
}

func TestFreshDropsStale(t *testing.T) {
	s := State{
		{PodUID: "old", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 30}}},
		{PodUID: "new", Started: t0.Add(5 * time.Minute)},
	}
	if fresh, dropped := s.Fresh(t0.Add(5*time.Minute + 30*time.Second)); len(fresh) != 2 || dropped != 0 {
		t.Errorf("at the longest grace plus 5m: %d kept, %d dropped; want both kept", len(fresh), dropped)
	}
	fresh, dropped := s.Fresh(t0.Add(5*time.Minute + 31*time.Second))
	if len(fresh) != 1 || fresh[0].PodUID != "new" || dropped != 1 {
		t.Errorf("past it: %+v, %d dropped; want only new", fresh, dropped)
	}
}

// A clock stepped back since a kill began must not turn into grace: the
// kubelet's sync loop waits 1.5 times what Remaining returns.
func TestRemainingNeverExceedsTheGrace(t *testing.T) {
	v := Victim{UID: "v", GracePeriodSeconds: 30, KillStarted: t0}
	for _, back := range []time.Duration{time.Millisecond, time.Second, time.Hour} {
		if left, started := v.Remaining(t0.Add(-back)); left != 30 || !started {
			t.Errorf("clock %s before the kill began: %d, %v; want the whole grace, 30, started", back, left, started)
		}
	}
}

// A grace longer than a Duration holds saturates instead of wrapping
// negative, which would give the victim none.
func TestRemainingDoesNotWrap(t *testing.T) {
	v := Victim{UID: "v", GracePeriodSeconds: math.MaxInt64, KillStarted: t0}
	if left, _ := v.Remaining(t0.Add(time.Second)); left < 1<<33 {
		t.Errorf("a grace of %d s, one second in: %d left", v.GracePeriodSeconds, left)
	}
	p := Preemption{PodUID: "crit", Started: t0, Victims: []Victim{v}}
	if p.Stale(t0.Add(24 * time.Hour)) {
		t.Error("a preemption with a grace of centuries is stale after a day")
	}
}

func TestResumable(t *testing.T) {
	now := t0.Add(time.Minute)
	victim := func(grace int64, started time.Time) Victim {
		return Victim{UID: "v", GracePeriodSeconds: grace, KillStarted: started}
	}
	for _, tc := range []struct {
		name    string
		started time.Time
		victims []Victim
		want    error
	}{
		{"as a kubelet writes it", t0, []Victim{victim(30, t0.Add(time.Second)), victim(30, time.Time{})}, nil},
		{"killed as it began, looked up at once", now, []Victim{victim(30, now)}, nil},
		{"began in the future", now.Add(time.Second), nil, ErrUntrusted},
		{"began an hour ahead", now.Add(time.Hour), []Victim{victim(30, now.Add(time.Hour))}, ErrUntrusted},
		{"a kill before the preemption began", t0, []Victim{victim(30, t0.Add(-time.Second))}, ErrUntrusted},
		{"a kill in the future", t0, []Victim{victim(30, now.Add(time.Nanosecond))}, ErrUntrusted},
		{"a negative grace", t0, []Victim{victim(-1, time.Time{})}, ErrUntrusted},
		{"stale", t0.Add(-time.Hour), []Victim{victim(30, t0.Add(-time.Hour))}, ErrStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Preemption{PodUID: "crit", Started: tc.started, Victims: tc.victims}.Resumable(now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Resumable: %v, want %v", err, tc.want)
			}
		})
	}
}
