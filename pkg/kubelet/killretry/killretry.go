// Package killretry decides, for the outage-recovery patch of pkg/patched,
// when a pod's kill that failed because the container runtime was
// unreachable is tried again, and keeps count of such retries for the
// admission handler, which waits on for a victim whose kill is being
// retried.
//
// Upstream's pod workers retry any failed sync after 10s (with jitter), so
// a victim whose stop was cut off by a runtime restart lives on for that
// long after the runtime is back, and its new stop starts a new grace
// period. Here the retry comes as soon as the runtime answers: the first
// after Initial, each further one twice as late, never later than Max.
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

// The retry schedule. The kubelet's sync loop looks for due pods every
// second, so retries closer than that would not come sooner.
const (
	Initial = 250 * time.Millisecond
	Max     = 2 * time.Second
	// forgetAfter ends a run of failures: a pod that failed longer ago than
	// this starts again at Initial.
	forgetAfter = time.Minute
)

// Unreachable reports whether err, a pod worker's sync error, says the
// runtime could not be reached. The kubelet flattens the errors of a pod's
// kill into one message, so a gRPC status is found in the chain when
// present and otherwise in the text, as gRPC words it.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		return grpcErr.GRPCStatus().Code() == codes.Unavailable
	}
	return strings.Contains(err.Error(), "code = "+codes.Unavailable.String())
}

// Delay is the wait before retry n (from 1) of a run of failures.
func Delay(n int) time.Duration {
	d := Initial
	for i := 1; i < n && d < Max; i++ {
		d *= 2
	}
	return min(d, Max)
}

// GraceLeft is what remains, in whole seconds rounded up, of a grace
// period of grace seconds that began elapsed ago; 0 once it has run out.
// A retried kill is given only this: the pod was signalled when its
// termination began, and a runtime that restarted since forgot the
// signal's deadline, not the pod's right to it.
func GraceLeft(grace int64, elapsed time.Duration) int64 {
	left := time.Duration(grace)*time.Second - elapsed
	if left <= 0 {
		return 0
	}
	return int64(math.Ceil(left.Seconds()))
}

type run struct {
	failures int
	last     time.Time
}

// Tracker counts the retries of each pod's kill. Safe for concurrent use;
// each operation costs O(1) but for Failed's occasional sweep of pods not
// seen for forgetAfter, O(pods tracked).
type Tracker struct {
	mu      sync.Mutex
	runs    map[types.UID]run
	retries map[types.UID]int
	swept   time.Time
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{runs: map[types.UID]run{}, retries: map[types.UID]int{}}
}

// Failed records that uid's kill failed, the runtime unreachable, at now,
// and returns how long to wait before retrying it.
func (t *Tracker) Failed(uid types.UID, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.swept) > forgetAfter {
		for id, r := range t.runs {
			if now.Sub(r.last) > forgetAfter {
				delete(t.runs, id)
				delete(t.retries, id)
			}
		}
		t.swept = now
	}
	r := t.runs[uid]
	if now.Sub(r.last) > forgetAfter {
		r.failures = 0
	}
	r.failures++
	r.last = now
	t.runs[uid] = r
	t.retries[uid]++
	return Delay(r.failures)
}

// Retries returns how many retries uid's kill has had scheduled.
func (t *Tracker) Retries(uid types.UID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.retries[uid]
}

// Shared is the kubelet's one Tracker: the pod workers record in it, the
// admission handler reads it.
var Shared = NewTracker()
