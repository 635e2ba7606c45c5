package main

import (
	"slices"
	"testing"
)

// The verdict fails a run for what the focus cannot accept, and for nothing
// else: a difference stands unless a recheck did not reproduce it, a failure
// on every kubelet passes an agreeing focus only with a cause here, and an
// all-pass focus takes nothing but passes.
func TestVerdict(t *testing.T) {
	pass := Result{Outcome: Passed}
	timeout := Result{Outcome: Failed, Reason: "failed: Timed out after 300s"}
	noDummy := Result{Outcome: Failed, Reason: "failed: ip: RTNETLINK answers: Operation not supported\nstack"}
	for _, tc := range []struct {
		name  string
		focus string
		runs  map[string]Runs
		rc    *Recheck
		want  []string
	}{{
		name:  "agreeing passes, all-pass focus",
		focus: "critical",
		runs:  map[string]Runs{"stock": {{"[It] a": pass}}, "critlet": {{"[It] a": pass}}},
	}, {
		name:  "a difference with no recheck",
		focus: "conformance",
		runs:  map[string]Runs{"stock": {{"[It] a": pass}}, "critlet": {{"[It] a": timeout}}},
		want:  []string{"kubelets differ on [It] a"},
	}, {
		name:  "a difference the recheck did not reproduce",
		focus: "conformance",
		runs:  map[string]Runs{"stock": {{"[It] a": pass}}, "critlet": {{"[It] a": timeout}}},
		rc:    &Recheck{NotReproduced: []string{"[It] a"}},
	}, {
		name:  "a failure on every kubelet that a cause explains, agreeing focus",
		focus: "conformance",
		runs:  map[string]Runs{"stock": {{"[It] a": noDummy}}, "critlet": {{"[It] a": noDummy}}},
	}, {
		name:  "a failure on every kubelet that a cause explains, all-pass focus",
		focus: "critical",
		runs:  map[string]Runs{"stock": {{"[It] a": noDummy}}, "critlet": {{"[It] a": noDummy}}},
		want: []string{
			"stock run 1: [It] a failed: failed: ip: RTNETLINK answers: Operation not supported",
			"critlet run 1: [It] a failed: failed: ip: RTNETLINK answers: Operation not supported",
		},
	}, {
		name:  "a failure on every kubelet that no cause explains, agreeing focus",
		focus: "conformance",
		runs:  map[string]Runs{"stock": {{"[It] a": timeout}}, "critlet": {{"[It] a": timeout}}},
		want:  []string{"no kubelet passes, and no cause on this machine explains it (add one to causes.go once found): [It] a"},
	}, {
		name:  "a kubelet with no run",
		focus: "conformance",
		runs:  map[string]Runs{"stock": {{"[It] a": pass}}},
		want:  []string{"kubelets differ on [It] a", "critlet: no run"},
	}} {
		cmp := compare([]string{"stock", "critlet"}, tc.runs)
		if got := verdict(focusSets[tc.focus], cmp, tc.runs, tc.rc); !slices.Equal(got, tc.want) {
			t.Errorf("%s: verdict = %q, want %q", tc.name, got, tc.want)
		}
	}
}
