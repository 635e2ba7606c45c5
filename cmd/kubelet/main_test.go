package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/settings"
)

func TestRunRefusesBadSettings(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantMsg  []string // all must appear on stderr
	}{
		{"unknown policy", []string{"--critical-preemption-policy=largest"}, nil, exitBadFlags,
			[]string{"--critical-preemption-policy", `"largest"`, "upstream, priority"}},
		{"zero parallelism", []string{"--critical-preemption-parallelism=0"}, nil, exitBadFlags,
			[]string{"--critical-preemption-parallelism", "want 1 to 256"}},
		{"negative parallelism", []string{"--critical-preemption-parallelism", "-3"}, nil, exitBadFlags,
			[]string{"--critical-preemption-parallelism", "want 1 to 256"}},
		{"absurd parallelism", []string{"--critical-preemption-parallelism=100000"}, nil, exitBadFlags,
			[]string{"--critical-preemption-parallelism", "want 1 to 256"}},
		{"malformed parallelism", []string{"--critical-preemption-parallelism=four"}, nil, exitBadFlags,
			[]string{"critical-preemption-parallelism", "four"}},
		{"missing value", []string{"--v=2", "--critical-preemption-policy"}, nil, exitBadFlags,
			[]string{"--critical-preemption-policy needs a value"}},
		{"replans out of range", []string{"--critical-preemption-max-replans=99"}, nil, exitBadFlags,
			[]string{"--critical-preemption-max-replans", "want 0 to 16"}},
		{"malformed timeout", []string{"--critical-preemption-kill-timeout=soon"}, nil, exitBadFlags,
			[]string{"critical-preemption-kill-timeout", "soon"}},
		{"misspelt flag", []string{"--critical-preemption-polcy=priority"}, nil, exitBadFlags,
			[]string{"critical-preemption-polcy"}},
		{"bad environment", nil, map[string]string{"CRITLET_PREEMPTION_POLICY": "random"}, exitBadFlags,
			[]string{"CRITLET_PREEMPTION_POLICY", "--critical-preemption-policy", "random"}},
		// Test binaries are built without the overlay, so valid settings get
		// as far as the build check, which must refuse.
		{"valid settings, unpatched build", []string{"--critical-preemption-policy=priority", "--version"}, nil, exitUnpatched,
			[]string{"make kubelet"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			started := false
			code := run(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, &stderr,
				func([]string, settings.Settings) int { started = true; return 0 })
			if code != tc.wantCode || started {
				t.Fatalf("exit %d (started: %v), want %d; stderr: %s", code, started, tc.wantCode, stderr.String())
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(stderr.String(), m) {
					t.Errorf("stderr %q lacks %q", stderr.String(), m)
				}
			}
		})
	}
}
