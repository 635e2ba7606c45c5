// Package checkout runs the README's make targets from a checkout whose
// path holds a space, as an operator's home directory may: paths reach the
// recipes through the environment and stay whole.
package checkout

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/test/testenv"
)

func TestMakeWithSpacesInPaths(t *testing.T) {
	for _, tool := range []string{"git", "make", "go"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool, err)
	}
	if os.Geteuid() != 0 {
		testenv.Need(t, "root", errors.New("the local node's targets need root"))
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "with space")
	clone := filepath.Join(base, "crit let")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", repo, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	state := filepath.Join(base, "state 'dir'")
	makeIn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-C", clone}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := makeIn("local-status", "STATE_DIR="+state)
	if !strings.Contains(out, "etcd") || !strings.Contains(out, "not started") {
		t.Errorf("local-status did not report the node's components:\n%s", out)
	}
	out = makeIn("local-down", "STATE_DIR="+state)
	if !strings.Contains(out, state+": not a local node's state directory: nothing done") {
		t.Errorf("local-down on a directory without a node did not say it did nothing there, by its whole path:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(base, "state")); !os.IsNotExist(err) {
		t.Errorf("a truncated state directory %s appeared", filepath.Join(base, "state"))
	}
	// The suites' state directories, as their recipes hand them over.
	for _, target := range []string{"test-e2e-node", "test-e2e-cluster", "test-e2e-upstream"} {
		dry := makeIn("-n", target)
		for _, line := range strings.Split(dry, "\n") {
			if strings.Contains(line, "-state ") && !strings.Contains(line, `-state "`) {
				t.Errorf("make %s hands a state directory over unquoted: %s", target, line)
			}
		}
	}
}
