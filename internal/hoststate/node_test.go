package hoststate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAddFilesSeesChanges(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	skipped := filepath.Join(dir, "lock")
	before := State{}
	before.AddFiles([]string{dir, missing}, skipped)
	for _, f := range []string{"a/b", "lock"} {
		if err := os.MkdirAll(filepath.Join(dir, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	after := State{}
	after.AddFiles([]string{dir, missing}, skipped)
	if before["files "+missing] != "absent" {
		t.Errorf("a missing directory is recorded as %q", before["files "+missing])
	}
	d := Diff(before, after)
	if len(d) != 1 || !strings.Contains(d[0], "a/b d") || strings.Contains(d[0], "lock") {
		t.Errorf("diff %q: want the new a/b and nothing about the skipped lock", d)
	}
}

func TestAddEntriesListsOneLevel(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := State{}
	before.AddEntries(dir)
	before.AddEntries(missing)
	if before["entries "+missing] != "absent" {
		t.Errorf("a missing directory is recorded as %q", before["entries "+missing])
	}
	// Below an entry is not recorded; a new entry is.
	if err := os.WriteFile(filepath.Join(dir, "a", "deep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	same := State{}
	same.AddEntries(dir)
	same.AddEntries(missing)
	if d := Diff(before, same); len(d) > 0 {
		t.Errorf("a file below an entry changed the record: %q", d)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	after := State{}
	after.AddEntries(dir)
	after.AddEntries(missing)
	d := Diff(before, after)
	if len(d) != 1 || !strings.Contains(d[0], "kubeconfig -") || !strings.Contains(d[0], "a d") {
		t.Errorf("diff %q: want the new kubeconfig beside the directory a", d)
	}
}

func TestAddProcessesFindsByCommandLine(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "state dir")
	// argv[0] carries the mark into the command line.
	if err := os.MkdirAll(mark, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, filepath.Join(mark, "sleep")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(mark, "sleep"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Start returns inside execve, before the command line is laid out
	// (proc.go): wait until it shows, which is what is asserted on.
	waitCmdline(t, cmd.Process.Pid, mark)
	s := State{}
	if err := s.AddProcesses("/no-such-cgroup-mark", mark); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s["processes of the node"], mark) {
		t.Errorf("processes %q: want the one naming %q", s["processes of the node"], mark)
	}
	cmd.Process.Kill()
	cmd.Wait()
	s = State{}
	if err := s.AddProcesses("/no-such-cgroup-mark", mark); err != nil {
		t.Fatal(err)
	}
	if s["processes of the node"] != "" {
		t.Errorf("after the kill: %q", s["processes of the node"])
	}
}

// waitCmdline waits until the command line of pid holds want.
func waitCmdline(t *testing.T, pid int, want string) {
	t.Helper()
	path := filepath.Join("/proc", strconv.Itoa(pid), "cmdline")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: command line %q after 10s, want it to hold %q", pid, b, want)
		}
	}
}
