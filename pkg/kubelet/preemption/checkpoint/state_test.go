package checkpoint

import (
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
	started := s.Started("crit", "a", t0.Add(time.Second))
	if !s[1].Victims[0].KillStarted.IsZero() {
		t.Fatal("Started changed the state it was given")
	}
	got, ok := started.Find("crit")
	if !ok || !got.Victims[0].KillStarted.Equal(t0.Add(time.Second)) || !got.Victims[1].KillStarted.IsZero() {
		t.Fatalf("after Started: %+v, %v", got, ok)
	}
	// The first start stands: it is when the victim was signalled.
	again := started.Started("crit", "a", t0.Add(5*time.Second))
	if got, _ := again.Find("crit"); !got.Victims[0].KillStarted.Equal(t0.Add(time.Second)) {
		t.Errorf("a second start moved the first: %v", got.Victims[0].KillStarted)
	}
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
