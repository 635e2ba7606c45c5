package readmission

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestBackoffDoublesToItsCap(t *testing.T) {
	b := Backoff{First: 2 * time.Second, Max: time.Minute}
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, b.After(n))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	if !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	if d := b.After(1 << 20); d != time.Minute {
		t.Fatalf("after many refusals %v, want the cap", d)
	}
}

func uids(a []Attempt) []types.UID {
	var out []types.UID
	for _, x := range a {
		out = append(out, x.UID)
	}
	return out
}

func TestDueWhenBackoffExpiresOrRoomMayHaveAppeared(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewQueue(DefaultBackoff)
	active := []types.UID{"a", "b", "c"}
	if n, next := q.Refused("static", "OutOfpods", t0, active); n != 1 || !next.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("first refusal: %d, %v", n, next)
	}
	if due := q.Due(t0.Add(time.Second), active); len(due) != 0 {
		t.Fatalf("due before the backoff with nothing gone: %v", due)
	}
	// A pod arriving does not make room.
	if due := q.Due(t0.Add(time.Second), append(active, "d")); len(due) != 0 {
		t.Fatalf("due after a pod arrived: %v", due)
	}
	// A pod leaving may.
	due := q.Due(t0.Add(time.Second), []types.UID{"a", "c", "d"})
	if len(due) != 1 || due[0].UID != "static" || due[0].PodsLeft != 1 || due[0].Refusals != 1 || due[0].LastReason != "OutOfpods" {
		t.Fatalf("due after b left: %+v", due)
	}
	// The backoff alone.
	if due := q.Due(t0.Add(2*time.Second), active); len(due) != 1 || due[0].PodsLeft != 0 {
		t.Fatalf("due at the backoff: %+v", due)
	}
	// A second refusal doubles the wait and takes the pods active then.
	t1 := t0.Add(2 * time.Second)
	if n, next := q.Refused("static", "OutOfcpu", t1, []types.UID{"a", "c", "d"}); n != 2 || !next.Equal(t1.Add(4*time.Second)) {
		t.Fatalf("second refusal: %d, %v", n, next)
	}
	if due := q.Due(t1.Add(3*time.Second), []types.UID{"a", "c", "d"}); len(due) != 0 {
		t.Fatalf("due within the second step: %v", due)
	}
	if due := q.Due(t1.Add(3*time.Second), []types.UID{"a", "c"}); len(due) != 1 || due[0].LastReason != "OutOfcpu" {
		t.Fatalf("d left: %+v", due)
	}
	q.Forget("static")
	if q.Len() != 0 || len(q.Due(t1.Add(time.Hour), nil)) != 0 {
		t.Fatal("forgotten pod still held")
	}
	q.Forget("static") // forgetting twice is harmless
}

func TestDueOldestRefusalFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := NewQueue(DefaultBackoff)
	for i, uid := range []types.UID{"z", "a", "m"} {
		q.Refused(uid, "OutOfpods", t0.Add(time.Duration(i)*time.Millisecond), nil)
	}
	// A later refusal of "z" keeps its place.
	q.Refused("z", "OutOfpods", t0.Add(time.Second), nil)
	if got := uids(q.Due(t0.Add(time.Hour), nil)); !slices.Equal(got, []types.UID{"z", "a", "m"}) {
		t.Fatalf("order %v", got)
	}
	q.Forget("a")
	if got := uids(q.Due(t0.Add(time.Hour), nil)); !slices.Equal(got, []types.UID{"z", "m"}) {
		t.Fatalf("order after forgetting a: %v", got)
	}
	// Refused again, a forgotten pod takes its place as a new refusal: last,
	// and once.
	q.Refused("a", "OutOfpods", t0.Add(2*time.Second), nil)
	if got := uids(q.Due(t0.Add(time.Hour), nil)); !slices.Equal(got, []types.UID{"z", "m", "a"}) {
		t.Fatalf("order after a's new refusal: %v", got)
	}
}

// A pod that can never fit is tried at most once per Max, however long it
// waits: never a tight loop.
func TestNeverFittingPodIsTriedBoundedTimes(t *testing.T) {
	t0 := time.Unix(0, 0)
	q := NewQueue(DefaultBackoff)
	q.Refused("p", "OutOfcpu", t0, []types.UID{"a"})
	attempts := 0
	// Housekeeping every 2s for an hour, nothing ever leaving.
	for now := t0; now.Before(t0.Add(time.Hour)); now = now.Add(2 * time.Second) {
		if len(q.Due(now, []types.UID{"a"})) > 0 {
			attempts++
			q.Refused("p", "OutOfcpu", now, []types.UID{"a"})
		}
	}
	// 2+4+8+16+32 s, then one a minute.
	if attempts < 55 || attempts > 65 {
		t.Fatalf("%d attempts in an hour, want about 60", attempts)
	}
}

// Under churn (a pod active at the refusal ending every 10s, another taking
// its place) a pod that never fits is tried at most twice per backoff step,
// never at every departure.
func TestNeverFittingPodUnderChurnIsTriedBoundedTimes(t *testing.T) {
	t0 := time.Unix(0, 0)
	q := NewQueue(DefaultBackoff)
	n := 0
	active := func() []types.UID { return []types.UID{types.UID(fmt.Sprint("churn-", n)), "steady"} }
	q.Refused("p", "OutOfcpu", t0, active())
	attempts, early := 0, 0
	for now := t0; now.Before(t0.Add(time.Hour)); now = now.Add(2 * time.Second) {
		if now.Sub(t0)%(10*time.Second) == 0 {
			n++ // one pod ends, another starts
		}
		for _, a := range q.Due(now, active()) {
			attempts++
			if a.PodsLeft > 0 {
				early++
			}
			q.Refused("p", "OutOfcpu", now, active())
		}
	}
	// About 60 timed attempts (as without churn) and at most as many early.
	if attempts > 130 {
		t.Fatalf("%d attempts in an hour under churn (%d early), want at most two per minute", attempts, early)
	}
	if early == 0 {
		t.Fatal("no attempt came early for a departure")
	}
}
