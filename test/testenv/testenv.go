// Package testenv lets tests skip for what a machine lacks, except where
// the machine is meant to have it: under make test, which installs every
// tool the tests use, such a skip is a failure.
package testenv

import (
	"os"
	"testing"
)

// NoSkipEnv, set to 1, turns Need's skips into failures. make test sets it.
const NoSkipEnv = "CRITLET_TEST_NO_SKIP"

// Need skips t, or fails it under NoSkipEnv, when err says the machine
// lacks what the test needs.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(NoSkipEnv) == "1" {
		t.Fatalf("%s: %v (%s=1: every test this machine can run must run; make test installs the tools)", what, err, NoSkipEnv)
	}
	t.Skipf("%s: %v", what, err)
}
