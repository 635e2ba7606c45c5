// Package phases checks make test's runner, hack/test-phases.sh, on a
// stand-in Makefile whose targets only sleep and say when: the order of
// the two lanes, the side lane's niceness, and what a failure in either
// lane does to the run.
package phases

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/critlet/critlet/test/testenv"
)

// standIn is a Makefile whose every target records "target start end nice"
// in events.log; SLEEP_<target> (dashes as underscores) sets how long it
// takes and FAIL=<target> makes it fail.
const standIn = `SHELL := /bin/bash
%:
	@start=$$(date +%s.%N); sleep $${SLEEP_$(subst -,_,$@):-0.2}; \
	echo "$@ $$start $$(date +%s.%N) $$(nice)" >> events.log; [[ "$${FAIL:-}" != "$@" ]]
`

// standInTree is a tree holding the runner and the stand-in Makefile.
func standInTree(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"make", "setsid", "nice", "ionice", "pgrep"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool, err)
	}
	dir := t.TempDir()
	script, err := os.ReadFile("../../hack/test-phases.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "hack"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hack", "test-phases.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(standIn), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type event struct {
	start, end float64
	nice       int
}

// run runs the runner in a tree of its own with env, and returns its
// output, the targets that ran, and its error.
func run(t *testing.T, env ...string) (string, map[string]event, error) {
	t.Helper()
	dir := standInTree(t)
	cmd := exec.Command("bash", "hack/test-phases.sh")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, runErr := cmd.CombinedOutput()
	events := map[string]event{}
	f, err := os.Open(filepath.Join(dir, "events.log"))
	if err != nil {
		t.Fatalf("no target ran: %v\n%s", err, out)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		start, _ := strconv.ParseFloat(fields[1], 64)
		end, _ := strconv.ParseFloat(fields[2], 64)
		nice, _ := strconv.Atoi(fields[3])
		events[fields[0]] = event{start, end, nice}
	}
	return string(out), events, runErr
}

func TestLanes(t *testing.T) {
	out, ev, err := run(t, "SLEEP_test_e2e_node=5", "SLEEP_test_cross=8")
	ended := float64(time.Now().UnixNano()) / 1e9
	if err != nil {
		t.Fatalf("the run failed: %v\n%s", err, out)
	}
	for _, target := range []string{"node-deps", "kubelet", "package", "control-plane", "test-e2e-node", "test-e2e-kubeadm", "test-e2e-cluster", "test-e2e-upstream",
		"test-go", "test-patched-kubelet", "test-build", "test-package", "test-race", "test-cross",
		"kubeadm-tools", "e2e-upstream-tools", "test-vet"} {
		if _, ok := ev[target]; !ok {
			t.Errorf("%s never ran", target)
		}
	}
	// Everything a suite reads is built before the side lane starts: once
	// the control plane is built, beside the node suite, niced; the main
	// lane is not.
	if ev["package"].end > ev["control-plane"].start {
		t.Errorf("the packages were built after the control plane: %+v", ev)
	}
	if ev["kubeadm-tools"].start < ev["control-plane"].end || ev["kubeadm-tools"].start > ev["test-e2e-node"].end {
		t.Errorf("the side lane did not start beside the node suite: %+v", ev)
	}
	// Relative to the main lane's, which is the caller's (a niced CI run
	// starts above 0).
	for _, side := range []string{"test-vet", "test-build", "test-race"} {
		if ev[side].nice != 19 || ev["test-e2e-node"].nice >= 19 {
			t.Errorf("niceness: %s %d, main lane %d; want 19 and the caller's", side, ev[side].nice, ev["test-e2e-node"].nice)
		}
	}
	// A suite starts only once the lane has built what it needs.
	for suite, need := range map[string]string{"test-e2e-kubeadm": "kubeadm-tools", "test-e2e-cluster": "kubeadm-tools", "test-e2e-upstream": "e2e-upstream-tools", "test-go": "test-vet"} {
		if ev[suite].start < ev[need].end {
			t.Errorf("%s started before %s ended", suite, need)
		}
	}
	// The side lane's last suite outlasts the main lane here: the run
	// waits for it, and says so.
	if ended < ev["test-cross"].end {
		t.Errorf("the run ended at %.1f, before the side lane's last suite (%.1f)", ended, ev["test-cross"].end)
	}
	for _, row := range []string{"cross                side", "wait:cross           main"} {
		if !strings.Contains(out, row) {
			t.Errorf("the table lacks %q:\n%s", row, out)
		}
	}
}

// A side lane phase that fails fails the run once the main lane's phase
// ends; nothing that waits for it runs, nor the rest of the lane (whether
// a suite that waits for an earlier lane phase runs first depends on how
// fast the lane got there).
func TestSideLaneFailure(t *testing.T) {
	out, ev, err := run(t, "FAIL=test-vet", "SLEEP_test_e2e_node=2")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the run: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(out, "the side lane failed") || !strings.Contains(out, "test-vet") {
		t.Errorf("the output does not say the side lane failed in vet:\n%s", out)
	}
	for _, never := range []string{"test-build", "test-go"} {
		if _, ok := ev[never]; ok {
			t.Errorf("%s ran after the side lane failed", never)
		}
	}
}

// A side lane suite that fails after the main lane has ended fails the run.
func TestSideLaneFailureAtTheEnd(t *testing.T) {
	out, ev, err := run(t, "FAIL=test-cross", "SLEEP_test_cross=6")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the run: %v, want exit status 1\n%s", err, out)
	}
	if _, ok := ev["test-patched-kubelet"]; !ok {
		t.Fatalf("the main lane did not run to its end:\n%s", out)
	}
	if !strings.Contains(out, "the side lane failed") || !strings.Contains(out, "test-cross") {
		t.Errorf("the output does not say the side lane failed in cross:\n%s", out)
	}
}

// A main lane phase that fails ends the run at once, and the side lane
// with it: nothing goes on compiling after make test returned.
func TestMainLaneFailureStopsTheBuildLane(t *testing.T) {
	start := time.Now()
	out, ev, err := run(t, "FAIL=test-e2e-node", "SLEEP_kubeadm_tools=31.7")
	if err == nil {
		t.Fatalf("the run passed with a failing node suite:\n%s", out)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the run took %s: it waited for the side lane", took)
	}
	if _, ok := ev["kubeadm-tools"]; ok {
		t.Error("the side lane's phase ran to its end after the run failed")
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 31.7").Output(); len(out) > 0 {
		t.Errorf("the side lane's processes outlived the run: %s", out)
	}
}

// A main lane killed outright runs no exit trap; the side lane notices
// and ends itself.
func TestKilledMainLaneStopsTheBuildLane(t *testing.T) {
	dir := standInTree(t)
	cmd := exec.Command("bash", "hack/test-phases.sh")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLEEP_kubeadm_tools=32.3", "SLEEP_test_e2e_node=60")
	// A process group of its own, so that the main lane's children (the
	// node suite's stand-in, the caller's to end) can be ended after.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	lane := func() []byte { out, _ := exec.Command("pgrep", "-f", "sleep 32.3").Output(); return out }
	for deadline := time.Now().Add(20 * time.Second); len(lane()) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the side lane never started")
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); len(lane()) > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the side lane outlived its killed main lane by 10 s: %s", lane())
		}
	}
}

// make test runs every test: a TEST_RUN from the environment, or given to
// make (which passes it on in MAKEFLAGS), stops the run before any phase.
func TestTestRunRefused(t *testing.T) {
	for _, env := range []string{"TEST_RUN=TestCriticalPod", "MAKEFLAGS= -- TEST_RUN=TestCriticalPod"} {
		dir := standInTree(t)
		cmd := exec.Command("bash", "hack/test-phases.sh")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "unset TEST_RUN") {
			t.Errorf("%s: %v, want exit status 2 saying to unset TEST_RUN\n%s", env, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "events.log")); err == nil {
			t.Errorf("%s: a phase ran", env)
		}
	}
}
