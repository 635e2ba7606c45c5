// Package readmission decides when a static pod that kubelet admission
// refused is tried again. It holds no kubelet state and does no I/O: the
// kubelet reports refusals and the pods active at each, and asks which
// refused pods are due; it runs the admission itself.
//
// A refused pod is due when a pod that was active at its last refusal has
// left (room may have appeared: the common case, retried at the kubelet's
// next housekeeping, within two seconds), or when its backoff has expired
// (room that appears otherwise: a resized pod, a grown node). The backoff
// starts at Backoff.First after the first refusal and doubles with each
// refusal up to Backoff.Max. A departure brings the next attempt forward
// at most once per backoff step: under churn (a pod ending every few
// seconds) the step is not restarted by the early attempt's refusal, so a
// pod that can never fit is tried at most twice per Max whatever leaves.
package readmission

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Backoff bounds how soon a refused pod is tried again when no pod has left.
type Backoff struct {
	// First is the wait after the first refusal; each refusal doubles it.
	First time.Duration
	// Max caps the wait.
	Max time.Duration
}

// DefaultBackoff: the first step is the kubelet's housekeeping period, so
// the first retry comes at the first housekeeping after it.
var DefaultBackoff = Backoff{First: 2 * time.Second, Max: time.Minute}

// After returns the wait after the n-th consecutive refusal (n >= 1).
func (b Backoff) After(n int) time.Duration {
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Queue holds the refused pods. Its methods may be called from any
// goroutine; the kubelet calls them from its sync loop.
type Queue struct {
	backoff Backoff

	mu   sync.Mutex
	pods map[types.UID]*refused
	// order keeps first refusals in order, so due pods are tried oldest
	// first, as the kubelet admits pods by creation time.
	order []types.UID
}

type refused struct {
	refusals int
	reason   string
	next     time.Time
	// heldRoom is the set of pods active at the last refusal; any of them
	// leaving makes the pod due, once per backoff step.
	heldRoom map[types.UID]bool
	// early: this step's early attempt (for a departure) has been made.
	early bool
}

// NewQueue returns an empty queue with backoff b.
func NewQueue(b Backoff) *Queue {
	return &Queue{backoff: b, pods: map[types.UID]*refused{}}
}

// Refused records that pod uid was refused at now for reason while active
// were the pods admitted. It returns how many consecutive refusals the pod
// has had and when its backoff expires. The refusal of an early attempt
// keeps the step it was made in (and lengthens it when the doubled wait
// ends later); any other starts a new step. O(len(active)).
func (q *Queue) Refused(uid types.UID, reason string, now time.Time, active []types.UID) (int, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.pods[uid]
	if r == nil {
		r = &refused{}
		q.pods[uid] = r
		q.order = append(q.order, uid)
	}
	r.refusals++
	r.reason = reason
	next := now.Add(q.backoff.After(r.refusals))
	if r.early && now.Before(r.next) {
		r.next = maxTime(r.next, next)
	} else {
		r.next = next
		r.early = false
	}
	r.heldRoom = make(map[types.UID]bool, len(active))
	for _, a := range active {
		r.heldRoom[a] = true
	}
	return r.refusals, r.next
}

// Due returns, oldest refusal first, the pods to try now given the pods
// active now: those whose backoff expired, and those a pod active at their
// refusal has left, unless this step's early attempt was made. The caller
// tries each pod returned: it counts as this step's early attempt.
// O(refused pods × active pods).
func (q *Queue) Due(now time.Time, active []types.UID) []Attempt {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return nil
	}
	still := make(map[types.UID]bool, len(active))
	for _, a := range active {
		still[a] = true
	}
	var due []Attempt
	for _, uid := range q.order {
		r := q.pods[uid]
		left := 0
		for held := range r.heldRoom {
			if !still[held] {
				left++
			}
		}
		switch {
		case !now.Before(r.next):
			due = append(due, Attempt{UID: uid, Refusals: r.refusals, LastReason: r.reason})
		case left > 0 && !r.early:
			r.early = true
			due = append(due, Attempt{UID: uid, Refusals: r.refusals, LastReason: r.reason, PodsLeft: left})
		}
	}
	return due
}

// Attempt is a refused pod due for another admission.
type Attempt struct {
	UID types.UID
	// Refusals is how many times in a row it was refused.
	Refusals int
	// LastReason is the reason of the last refusal.
	LastReason string
	// PodsLeft counts the pods active at the last refusal that have left
	// when that made it due early; 0 when its backoff expired.
	PodsLeft int
}

// Forget drops uid: it was admitted, or it is gone. O(refused pods).
func (q *Queue) Forget(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pods[uid]; !ok {
		return
	}
	delete(q.pods, uid)
	q.order = slices.DeleteFunc(q.order, func(u types.UID) bool { return u == uid })
}

// Has reports whether uid is queued. O(1).
func (q *Queue) Has(uid types.UID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.pods[uid]
	return ok
}

// Len is the number of refused pods held.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pods)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
