// Package termination runs the kills of one admission's victims: at most a
// given number at once across all of the admission's rounds, each waited for
// at most its own timeout, none started once the admission's context is
// done.
//
// It knows victims only by their index and does no I/O of its own: what a
// kill does, and what is logged or counted about it, belongs to the caller's
// Funcs. The contract, per victim i that starts:
//
//	Wave(first, end)  once before the Starts of victims first to end-1, which
//	                  start together: each found a free slot at once
//	Start(i)          before its kill, in victim order, from Run's goroutine
//	Kill(i)           once, from a goroutine of its own
//	Done(i, verdict)  once: Kill's error, ErrTimeout, or ErrCancelled
//	Late(i, err)      once more, only when the verdict came before Kill returned
//
// A victim holds one of the Slots from Start until Kill has returned and
// been reported. Runs that share Slots (one admission's re-planning rounds)
// therefore never have more kills in flight together than the Slots hold,
// even while victims of an earlier run are still terminating after their
// timeout: a later run waits for their slots. With one slot each victim's
// Done comes before the next victim's Start.
//
// Cost: two goroutines and one timer per victim; Run returns once every
// started victim has a verdict, which is at most the slowest verdict after
// the last start (plus, for a later run, the wait for slots still held).
package termination

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is the verdict on a victim still terminating when its timeout
// expired. Its kill goes on; its resources do not count as freed.
var ErrTimeout = errors.New("still terminating when the kill timeout expired")

// ErrNotStarted marks victims never started because the admission's
// context was done first.
var ErrNotStarted = errors.New("not started")

// ErrCancelled is the verdict on a victim still terminating when the
// admission's context was done. Its kill goes on.
var ErrCancelled = errors.New("admission cancelled while terminating")

// Funcs are the caller's side of one run; Wave, Start, Done and Late may be
// nil.
type Funcs struct {
	// Wave lets the caller do once, for victims that start together, what
	// must precede their kills (a record written to disk, say).
	Wave  func(first, end int)
	Start func(i int)
	// Kill stops victim i, blocking until it is stopped or has failed.
	Kill func(i int) error
	// Timeout returns how long to wait for victim i; 0 waits for its kill.
	Timeout func(i int) time.Duration
	Done    func(i int, verdict error)
	Late    func(i int, err error)
}

// Slots bounds the kills in flight at once across the runs that share it.
type Slots chan struct{}

// NewSlots returns Slots for at most parallelism (>= 1) kills at once.
func NewSlots(parallelism int) Slots { return make(Slots, parallelism) }

// Run kills victims 0 to n-1, each while holding one of slots, and returns
// each one's verdict: nil when it was stopped.
func Run(ctx context.Context, n int, slots Slots, f Funcs) []error {
	verdicts := make([]error, n)
	var wg sync.WaitGroup
	for first := 0; first < n; {
		// Wait for one slot, then take those free at once: a wave.
		end := first
		select {
		case slots <- struct{}{}:
			end++
		case <-ctx.Done():
		}
		for end > first && end < n {
			select {
			case slots <- struct{}{}:
				end++
				continue
			default:
			}
			break
		}
		// A free slot and a done context may both be ready; never start
		// a kill once the context is done.
		if err := ctx.Err(); err != nil {
			for range end - first {
				<-slots
			}
			for k := first; k < n; k++ {
				verdicts[k] = fmt.Errorf("%w: %w", ErrNotStarted, err)
			}
			break
		}
		if f.Wave != nil {
			f.Wave(first, end)
		}
		for i := first; i < end; i++ {
			if f.Start != nil {
				f.Start(i)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				verdicts[i] = watch(ctx, i, f, func() { <-slots })
			}()
		}
		first = end
	}
	wg.Wait()
	return verdicts
}

// watch runs victim i's kill and returns its verdict; release frees its slot
// once the kill has returned and been reported.
func watch(ctx context.Context, i int, f Funcs, release func()) error {
	killed := make(chan error, 1)
	go func() { killed <- f.Kill(i) }()
	var expired <-chan time.Time
	if f.Timeout != nil {
		if d := f.Timeout(i); d > 0 {
			timer := time.NewTimer(d)
			defer timer.Stop()
			expired = timer.C
		}
	}
	var verdict error
	select {
	case err := <-killed:
		report(f.Done, i, err)
		release()
		return err
	case <-expired:
		verdict = ErrTimeout
	case <-ctx.Done():
		verdict = fmt.Errorf("%w: %w", ErrCancelled, ctx.Err())
	}
	report(f.Done, i, verdict)
	go func() {
		report(f.Late, i, <-killed)
		release()
	}()
	return verdict
}

func report(fn func(int, error), i int, err error) {
	if fn != nil {
		fn(i, err)
	}
}
