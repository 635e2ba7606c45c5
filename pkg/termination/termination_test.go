package termination

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// trace records what Run did, in the order it happened.
type trace struct {
	mu       sync.Mutex
	steps    []string
	inFlight int
	peak     int
	done     map[int]int
	late     map[int]int
}

func newTrace() *trace { return &trace{done: map[int]int{}, late: map[int]int{}} }

func (tr *trace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.steps = append(tr.steps, fmt.Sprintf(format, args...))
}

// funcs returns Funcs whose kill of victim i blocks on gate(i) and then
// returns result(i).
func (tr *trace) funcs(gate func(int) <-chan struct{}, result func(int) error, timeout time.Duration) Funcs {
	return Funcs{
		Start: func(i int) { tr.add("start %d", i) },
		Kill: func(i int) error {
			tr.mu.Lock()
			tr.inFlight++
			tr.peak = max(tr.peak, tr.inFlight)
			tr.mu.Unlock()
			if g := gate(i); g != nil {
				<-g
			}
			tr.mu.Lock()
			tr.inFlight--
			tr.mu.Unlock()
			return result(i)
		},
		Timeout: func(int) time.Duration { return timeout },
		Done: func(i int, err error) {
			tr.add("done %d %v", i, err)
			tr.mu.Lock()
			tr.done[i]++
			tr.mu.Unlock()
		},
		Late: func(i int, err error) {
			tr.mu.Lock()
			tr.late[i]++
			tr.mu.Unlock()
		},
	}
}

func TestParallelismOneRunsVictimsOneAfterAnother(t *testing.T) {
	tr := newTrace()
	boom := errors.New("boom")
	verdicts := Run(context.Background(), 3, NewSlots(1), tr.funcs(func(int) <-chan struct{} { return nil },
		func(i int) error {
			if i == 1 {
				return boom
			}
			return nil
		}, 0))
	want := []string{"start 0", "done 0 <nil>", "start 1", "done 1 boom", "start 2", "done 2 <nil>"}
	if !slices.Equal(tr.steps, want) {
		t.Fatalf("steps %q, want %q", tr.steps, want)
	}
	if verdicts[0] != nil || verdicts[1] != boom || verdicts[2] != nil {
		t.Fatalf("verdicts %v", verdicts)
	}
}

func TestInFlightNeverExceedsParallelismEvenAfterTimeouts(t *testing.T) {
	const n, parallelism = 10, 3
	tr := newTrace()
	release := make(chan struct{})
	finished := make(chan []error)
	go func() {
		finished <- Run(context.Background(), n, NewSlots(parallelism), tr.funcs(func(int) <-chan struct{} { return release },
			func(int) error { return nil }, 10*time.Millisecond))
	}()
	// The first three time out long before this; their kills still hold
	// the slots, so no fourth victim may start.
	time.Sleep(300 * time.Millisecond)
	tr.mu.Lock()
	started := 0
	for _, s := range tr.steps {
		if s[:5] == "start" {
			started++
		}
	}
	timedOut := tr.done[0] + tr.done[1] + tr.done[2]
	tr.mu.Unlock()
	if started != parallelism || timedOut != parallelism {
		t.Fatalf("%d started and %d timed out while every kill hung; want %d of each", started, timedOut, parallelism)
	}
	close(release)
	verdicts := <-finished
	for i := range parallelism {
		if !errors.Is(verdicts[i], ErrTimeout) {
			t.Errorf("victim %d: verdict %v, want ErrTimeout", i, verdicts[i])
		}
	}
	if tr.peak > parallelism {
		t.Fatalf("%d kills in flight at once, parallelism %d", tr.peak, parallelism)
	}
	// Late reports arrive once each kill has returned.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr.mu.Lock()
		late := tr.late[0] + tr.late[1] + tr.late[2]
		tr.mu.Unlock()
		if late == parallelism || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := range n {
		wantLate := 0
		if i < parallelism {
			wantLate = 1
		}
		if tr.done[i] != 1 || tr.late[i] != wantLate {
			t.Errorf("victim %d: %d verdicts and %d late reports, want 1 and %d", i, tr.done[i], tr.late[i], wantLate)
		}
	}
}

func TestCancelledContextStartsNothingMore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tr := newTrace()
	hold := make(chan struct{})
	defer close(hold)
	f := tr.funcs(func(i int) <-chan struct{} {
		if i == 1 {
			cancel()
			return hold
		}
		return nil
	}, func(int) error { return nil }, 0)
	verdicts := Run(ctx, 4, NewSlots(1), f)
	want := []string{"start 0", "done 0 <nil>", "start 1"}
	if len(tr.steps) != 4 || !slices.Equal(tr.steps[:3], want) {
		t.Fatalf("steps %q, want %q and victim 1 stopped waiting for", tr.steps, want)
	}
	if verdicts[0] != nil || !errors.Is(verdicts[1], ErrCancelled) || !errors.Is(verdicts[1], context.Canceled) {
		t.Fatalf("verdicts %v", verdicts)
	}
	for _, i := range []int{2, 3} {
		if !errors.Is(verdicts[i], ErrNotStarted) || !errors.Is(verdicts[i], context.Canceled) {
			t.Errorf("victim %d: verdict %v, want ErrNotStarted", i, verdicts[i])
		}
	}

	tr = newTrace()
	if verdicts := Run(ctx, 2, NewSlots(8), tr.funcs(func(int) <-chan struct{} { return nil }, func(int) error { return nil }, 0)); len(tr.steps) != 0 ||
		!errors.Is(verdicts[0], ErrNotStarted) || !errors.Is(verdicts[1], ErrNotStarted) {
		t.Fatalf("with the context already done: steps %q, verdicts %v; want nothing started", tr.steps, verdicts)
	}
}

func TestVictimsRunConcurrently(t *testing.T) {
	for _, parallelism := range []int{2, 5, 8} {
		tr := newTrace()
		arrived := make(chan struct{}, 5)
		release := make(chan struct{})
		f := tr.funcs(func(int) <-chan struct{} { arrived <- struct{}{}; return release }, func(int) error { return nil }, 0)
		finished := make(chan []error)
		go func() { finished <- Run(context.Background(), 5, NewSlots(parallelism), f) }()
		want := min(parallelism, 5)
		for k := range want {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("parallelism %d: only %d kills started while none could finish", parallelism, k)
			}
		}
		close(release)
		<-finished
		if tr.peak != want {
			t.Fatalf("parallelism %d: peak %d kills at once, want %d", parallelism, tr.peak, want)
		}
	}
}

// Runs sharing Slots (one admission's rounds) never exceed them together: a
// later run waits while kills of an earlier one, given up on after their
// timeout, still hold their slots.
func TestSharedSlotsBoundKillsAcrossRuns(t *testing.T) {
	const parallelism = 2
	slots := NewSlots(parallelism)
	tr := newTrace()
	release := make(chan struct{})
	hang := func(int) <-chan struct{} { return release }
	ok := func(int) error { return nil }
	// The first run's two victims time out and keep terminating.
	first := Run(context.Background(), 2, slots, tr.funcs(hang, ok, 10*time.Millisecond))
	for i, v := range first {
		if !errors.Is(v, ErrTimeout) {
			t.Fatalf("first run, victim %d: verdict %v, want ErrTimeout", i, v)
		}
	}
	second := newTrace()
	finished := make(chan []error)
	go func() {
		finished <- Run(context.Background(), 2, slots, second.funcs(func(int) <-chan struct{} { return nil }, ok, 0))
	}()
	time.Sleep(200 * time.Millisecond)
	second.mu.Lock()
	started := len(second.steps)
	second.mu.Unlock()
	if started != 0 {
		t.Fatalf("the second run started %q while the first run's %d kills held every slot", second.steps, parallelism)
	}
	close(release)
	select {
	case verdicts := <-finished:
		if verdicts[0] != nil || verdicts[1] != nil {
			t.Fatalf("second run: verdicts %v", verdicts)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second run did not go on once the first run's kills returned")
	}
}

// Victims that find free slots at once start as one wave, announced once
// before their Starts; a victim that waits for a slot starts a wave of its
// own when one frees.
func TestWavesStartTogether(t *testing.T) {
	const n = 5
	gates := make([]chan struct{}, n)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	tr := newTrace()
	f := tr.funcs(func(i int) <-chan struct{} { return gates[i] }, func(int) error { return nil }, 0)
	waves := make(chan [2]int, n)
	f.Wave = func(first, end int) {
		tr.add("wave %d-%d", first, end)
		waves <- [2]int{first, end}
	}
	result := make(chan []error)
	go func() { result <- Run(context.Background(), n, NewSlots(3), f) }()
	want := [][2]int{{0, 3}, {3, 4}, {4, 5}}
	for k, w := range want {
		select {
		case got := <-waves:
			if got != w {
				t.Fatalf("wave %d = %v, want %v", k, got, w)
			}
		case <-time.After(time.Minute):
			t.Fatalf("wave %d never came", k)
		}
		if k < len(want)-1 {
			close(gates[k]) // one slot frees: the next victim's wave
		}
	}
	for k := len(want) - 1; k < n; k++ {
		close(gates[k])
	}
	for i, err := range <-result {
		if err != nil {
			t.Errorf("victim %d: %v", i, err)
		}
	}
	// Each wave came before its victims' Starts.
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, w := range want {
		at := slices.Index(tr.steps, fmt.Sprintf("wave %d-%d", w[0], w[1]))
		for i := w[0]; i < w[1]; i++ {
			if s := slices.Index(tr.steps, fmt.Sprintf("start %d", i)); s < at {
				t.Errorf("start %d (step %d) before its wave (step %d): %q", i, s, at, tr.steps)
			}
		}
	}
}
