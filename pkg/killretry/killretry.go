// Package killretry decides, for the outage-recovery patch of pkg/patched,
// when a pod's kill that failed because the container runtime was
// unreachable is tried again and with how much of its grace period, and
// keeps count of such retries for the admission handler, which waits on for
// a victim whose kill is being retried.
//
// Upstream's pod workers retry any failed sync after 10s (with jitter), so
// a victim whose stop was cut off by a runtime restart lives on for that
// long after the runtime is back, and its new stop starts a new grace
// period. Here the first retries come soon after the failure, so a runtime
// that restarts in a second or two is retried as soon as it answers: the
// first after Initial, each further one twice as late, never later than
// Max, upstream's own backoff, so a long outage is retried no more often
// than upstream retries it.
package killretry

import (
	"errors"
	"math"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
)

// The retry schedule. Max is the pod workers' backoff after a failed sync.
const (
	Initial = 250 * time.Millisecond
	Max     = 10 * time.Second
	// forgetAfter ends a run of failures: a pod that failed longer ago than
	// this starts again at Initial.
	forgetAfter = time.Minute
)

// unavailablePrefix is how gRPC renders a status of code Unavailable
// (status.Error's text). The kubelet keeps only the text of a failed
// container's kill (kuberuntime stores err.Error() in the sync result's
// message), so that rendering is all that is left of the code.
var unavailablePrefix = "rpc error: code = " + codes.Unavailable.String() + " desc = "

// Unreachable reports whether err, a pod worker's sync error, says the
// runtime could not be reached: a gRPC status of code Unavailable in the
// chain or, as the kubelet flattens a kill's errors to text, gRPC's own
// rendering of one.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		return grpcErr.GRPCStatus().Code() == codes.Unavailable
	}
	return strings.Contains(err.Error(), unavailablePrefix)
}

// Delay is the wait before retry n (from 1) of a run of failures.
func Delay(n int) time.Duration {
	d := Initial
	for i := 1; i < n && d < Max; i++ {
		d *= 2
	}
	return min(d, Max)
}

// GraceLeft is what remains at now, in whole seconds rounded up, of a grace
// period that ends at deadline; 0 once it has run out. A retried kill is
// given only this: the pod was signalled when its termination began, and a
// runtime that restarted since forgot the signal's deadline, not the pod's
// right to it.
func GraceLeft(deadline, now time.Time) int64 {
	left := deadline.Sub(now)
	if left <= 0 {
		return 0
	}
	return int64(math.Ceil(left.Seconds()))
}

type run struct {
	failures int
	last     time.Time
}

// termination is the grace deadline of one pod's termination.
type termination struct {
	began    time.Time
	deadline time.Time
}

// Tracker counts the retries of each pod's kill and keeps each terminating
// pod's grace deadline. Safe for concurrent use; each operation costs O(1)
// but for Failed's sweep, at most once a forgetAfter, of the pods not seen
// for that long, O(pods tracked).
type Tracker struct {
	mu        sync.Mutex
	runs      map[types.UID]run
	retries   map[types.UID]int
	deadlines map[types.UID]termination
	swept     time.Time
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{runs: map[types.UID]run{}, retries: map[types.UID]int{}, deadlines: map[types.UID]termination{}}
}

// Failed records that uid's kill failed, the runtime unreachable, at now,
// and returns how long to wait before retrying it, and whether this failure
// began a run of them (the one worth telling the operator about).
func (t *Tracker) Failed(uid types.UID, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.swept) > forgetAfter {
		t.sweep(now)
	}
	r := t.runs[uid]
	if now.Sub(r.last) > forgetAfter {
		r.failures = 0
	}
	r.failures++
	r.last = now
	t.runs[uid] = r
	t.retries[uid]++
	return Delay(r.failures), r.failures == 1
}

// sweep forgets the runs quiet for forgetAfter and the deadlines past by as
// long.
func (t *Tracker) sweep(now time.Time) {
	for id, r := range t.runs {
		if now.Sub(r.last) > forgetAfter {
			delete(t.runs, id)
			delete(t.retries, id)
		}
	}
	for id, d := range t.deadlines {
		if now.Sub(d.deadline) > forgetAfter {
			delete(t.deadlines, id)
		}
	}
	t.swept = now
}

// Deadline returns when the grace period of uid's termination that began at
// began runs out. The first call for a termination fixes it at began plus
// grace, the grace period the termination began with; later calls return
// the same deadline whatever grace they pass. The pod workers keep the
// shortest grace they were handed, so after one retry their grace period is
// already what was left, and subtracting the time since began from it again
// would spend the grace twice.
func (t *Tracker) Deadline(uid types.UID, began time.Time, grace int64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := t.deadlines[uid]; ok && d.began.Equal(began) {
		return d.deadline
	}
	d := termination{began: began, deadline: began.Add(time.Duration(grace) * time.Second)}
	t.deadlines[uid] = d
	return d.deadline
}

// Retries returns how many retries uid's kill has had scheduled.
func (t *Tracker) Retries(uid types.UID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.retries[uid]
}
