package killretry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

func TestUnreachable(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "error reading from server: EOF")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"gRPC Unavailable", unavailable, true},
		{"wrapped gRPC Unavailable", fmt.Errorf("killing: %w", unavailable), true},
		{"gRPC Unknown", status.Error(codes.Unknown, "runc did not terminate"), false},
		// As the kubelet reports a failed kill: the aggregate of each
		// container's and the sandbox's error, flattened to text.
		{"the kubelet's sync error", fmt.Errorf("error killing terminating pod: %v", utilerrors.NewAggregate([]error{
			fmt.Errorf("failed to %q for %q with KillContainerError: %q", "KillContainer", "c", unavailable.Error()),
		})), true},
		{"other text", errors.New("timeout waiting to kill pod"), false},
		// The code's name alone, outside gRPC's rendering, is no status.
		{"text naming the code", errors.New(`container "c": exit code = Unavailable`), false},
		{"another code rendered", fmt.Errorf("killing: %q", status.Error(codes.DeadlineExceeded, "Unavailable").Error()), false},
	}
	for _, tc := range tests {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestDelayDoublesToMax(t *testing.T) {
	// Never later than the pod workers' own 10s backoff: a long outage is
	// retried no more often than upstream retries it.
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestTrackerRunsAndRetries(t *testing.T) {
	tr := NewTracker()
	t0 := time.Unix(1000, 0)
	if d, first := tr.Failed("a", t0); d != Initial || !first {
		t.Fatalf("first failure waits %s (first %v), want %s, first", d, first, Initial)
	}
	if d, first := tr.Failed("a", t0.Add(time.Second)); d != 2*Initial || first {
		t.Fatalf("second failure waits %s (first %v), want %s, not first", d, first, 2*Initial)
	}
	if d, first := tr.Failed("b", t0.Add(time.Second)); d != Initial || !first {
		t.Fatalf("another pod's first failure waits %s (first %v), want %s, first", d, first, Initial)
	}
	if n := tr.Retries("a"); n != 2 {
		t.Fatalf("Retries(a) = %d, want 2", n)
	}
	// A failure long after the last one starts a new run, counted afresh.
	if d, first := tr.Failed("a", t0.Add(2*forgetAfter)); d != Initial || !first {
		t.Fatalf("failure after a quiet minute waits %s (first %v), want %s, first", d, first, Initial)
	}
	if n := tr.Retries("a"); n != 1 {
		t.Fatalf("Retries(a) = %d after a new run, want 1", n)
	}
	// b was swept with the last failure: nothing of it is kept.
	if n := tr.Retries("b"); n != 0 {
		t.Fatalf("Retries(b) = %d after its run was forgotten, want 0", n)
	}
}

func TestGraceLeft(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		deadline time.Duration // after t0
		now      time.Duration
		want     int64
	}{
		{10 * time.Second, 0, 10}, {10 * time.Second, 1500 * time.Millisecond, 9}, {10 * time.Second, 9999 * time.Millisecond, 1},
		{10 * time.Second, 10 * time.Second, 0}, {10 * time.Second, time.Minute, 0}, {0, 0, 0},
	} {
		if got := GraceLeft(t0.Add(tc.deadline), t0.Add(tc.now)); got != tc.want {
			t.Errorf("GraceLeft(t0+%s, t0+%s) = %d, want %d", tc.deadline, tc.now, got, tc.want)
		}
	}
}

// The pod workers store each retry's shortened grace as the pod's grace
// period. A termination's deadline is fixed by the grace it began with, so
// a later call passing that shortened grace changes nothing: the grace is
// spent once, not once per retry.
func TestDeadlineFixedByTheFirstGrace(t *testing.T) {
	tr := NewTracker()
	began := time.Unix(1000, 0)
	want := began.Add(30 * time.Second)
	if d := tr.Deadline("a", began, 30); !d.Equal(want) {
		t.Fatalf("Deadline = %s, want %s", d, want)
	}
	// What the retry at ~12s was given, now the pod workers' grace period.
	left := GraceLeft(tr.Deadline("a", began, 30), began.Add(11750*time.Millisecond))
	if left != 19 {
		t.Fatalf("left at 11.75s of 30s: %d, want 19", left)
	}
	if d := tr.Deadline("a", began, left); !d.Equal(want) {
		t.Fatalf("Deadline after a retry = %s, want %s: the grace would be spent twice", d, want)
	}
	if got := GraceLeft(tr.Deadline("a", began, left), began.Add(20*time.Second)); got != 10 {
		t.Fatalf("left at 20s of 30s: %d, want 10", got)
	}
	// Another termination of the same UID (never in a kubelet, but a record
	// must not outlive what it is about) starts afresh.
	if d := tr.Deadline("a", began.Add(time.Hour), 5); !d.Equal(began.Add(time.Hour + 5*time.Second)) {
		t.Fatalf("a new termination kept the old deadline: %s", d)
	}
	// Deadlines long past are swept with the runs.
	tr.Failed("b", began.Add(3*time.Hour))
	if _, ok := tr.deadlines["a"]; ok {
		t.Fatal("a deadline an hour past was kept")
	}
}
