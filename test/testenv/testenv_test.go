package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Need skips normally and fails under NoSkipEnv: the test runs itself in a
// child process to see both.
func TestNeed(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Need(t, "a tool", errors.New("missing"))
		return
	}
	for env, want := range map[string]string{"": "--- SKIP: TestNeed", "1": "--- FAIL: TestNeed"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeed$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", NoSkipEnv+"="+env)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), want) {
			t.Errorf("%s=%q: want %q in:\n%s", NoSkipEnv, env, want, out)
		}
	}
}
