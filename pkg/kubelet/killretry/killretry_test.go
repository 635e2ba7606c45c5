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
	}
	for _, tc := range tests {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestDelayDoublesToMax(t *testing.T) {
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	for i, w := range want {
		if got := Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestTrackerRunsAndRetries(t *testing.T) {
	tr := NewTracker()
	t0 := time.Unix(1000, 0)
	if d := tr.Failed("a", t0); d != Initial {
		t.Fatalf("first failure waits %s, want %s", d, Initial)
	}
	if d := tr.Failed("a", t0.Add(time.Second)); d != 2*Initial {
		t.Fatalf("second failure waits %s, want %s", d, 2*Initial)
	}
	if d := tr.Failed("b", t0.Add(time.Second)); d != Initial {
		t.Fatalf("another pod's first failure waits %s, want %s", d, Initial)
	}
	if n := tr.Retries("a"); n != 2 {
		t.Fatalf("Retries(a) = %d, want 2", n)
	}
	// A failure long after the last one starts a new run, counted afresh.
	if d := tr.Failed("a", t0.Add(2*forgetAfter)); d != Initial {
		t.Fatalf("failure after a quiet minute waits %s, want %s", d, Initial)
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
	for _, tc := range []struct {
		grace   int64
		elapsed time.Duration
		want    int64
	}{
		{10, 0, 10}, {10, 1500 * time.Millisecond, 9}, {10, 9999 * time.Millisecond, 1},
		{10, 10 * time.Second, 0}, {10, time.Minute, 0}, {0, 0, 0},
	} {
		if got := GraceLeft(tc.grace, tc.elapsed); got != tc.want {
			t.Errorf("GraceLeft(%d, %s) = %d, want %d", tc.grace, tc.elapsed, got, tc.want)
		}
	}
}
