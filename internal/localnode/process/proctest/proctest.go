// Package proctest starts the short-lived processes that tests of process
// Refs, and of namespaces opened through them, are set against (sleep,
// unshare): each a Ref, its start time read at once, and killed with
// everything it started when the test ends.
package proctest

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
)

// Start starts args in a process group of its own and returns it as a
// Ref named name. The group is killed when t ends: an unshare --fork's
// child, a PID namespace's first process, dies with it.
func Start(t testing.TB, name string, args ...string) process.Ref {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	ref, err := process.Find(name, cmd.Process.Pid)
	if err != nil {
		t.Fatalf("%s exited at once: %v", args[0], err)
	}
	return ref
}

// Child waits for parent's first running child (process.Ref.Children)
// and returns it.
func Child(t testing.TB, parent process.Ref) process.Ref {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		children, err := parent.Children()
		if err != nil {
			t.Fatal(err)
		}
		if len(children) > 0 {
			return children[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) started no child in 10s", parent.Name, parent.PID)
		}
	}
}
