package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func spec(t *testing.T, name string, args ...string) Spec {
	dir := t.TempDir()
	return Spec{Name: name, Path: args[0], Args: args[1:], LogFile: filepath.Join(dir, name+".log"), PIDFile: filepath.Join(dir, name+".pid")}
}

func waitLog(t *testing.T, log, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(Tail(log, 3), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed %q:\n%s", want, Tail(log, 3))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartReadStop(t *testing.T) {
	s := spec(t, "sleeper", "/bin/sh", "-c", "echo hello; exec sleep 60")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	waitLog(t, s.LogFile, "| hello")
	ref, ok, err := Read("sleeper", s.PIDFile)
	if err != nil || !ok {
		t.Fatalf("Read: %v %v", ok, err)
	}
	if ref.PID != h.PID || ref.Started != h.Started || ref.LogFile != s.LogFile {
		t.Errorf("Read = %+v, want the started process %+v", ref, h.Ref)
	}
	if !ref.Alive() {
		t.Fatal("started process is not alive")
	}
	if err := ref.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("process still runs after Stop")
	}
	if ref.Alive() {
		t.Error("Alive after Stop")
	}
	// Stopping what is gone is not an error.
	if err := ref.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if log := Tail(s.LogFile, 5); !strings.Contains(log, "| hello") || !strings.Contains(log, "starting /bin/sh") {
		t.Errorf("log tail lacks the output or the start header:\n%s", log)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	s := spec(t, "stubborn", "/bin/sh", "-c", `trap "" TERM; echo ready; while true; do sleep 1; done`)
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	// Wait until the trap is set, or SIGTERM could arrive before it.
	waitLog(t, s.LogFile, "| ready")
	start := time.Now()
	if err := h.Ref.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stopped after %s: SIGTERM should have been ignored for the grace period", d)
	}
	<-h.Done()
}

// A PID file whose process has been replaced by another with the same PID
// must not lead to signalling the newcomer.
func TestStaleIdentityIsNotSignalled(t *testing.T) {
	s := spec(t, "other", "/bin/sleep", "60")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	stale := h.Ref
	stale.Started++
	if stale.Alive() {
		t.Fatal("a different start time still counts as alive")
	}
	if err := stale.Stop(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A signal takes a moment to act.
	if h.Ref.Wait(500 * time.Millisecond) {
		t.Fatal("Stop of a stale reference killed an unrelated process")
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := Read("x", filepath.Join(dir, "missing.pid")); ok || err != nil {
		t.Errorf("missing PID file: ok=%v err=%v, want neither", ok, err)
	}
	for _, content := range []string{"", "12", "abc 5", "-1 5", "12 x"} {
		p := filepath.Join(dir, "bad.pid")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Read("x", p); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("PID file %q: err = %v, want malformed", content, err)
		}
	}
}

func TestStartFailures(t *testing.T) {
	s := spec(t, "nothing", "/nonexistent/binary")
	if _, err := Start(s); err == nil || !strings.Contains(err.Error(), "nothing: starting /nonexistent/binary") {
		t.Errorf("err = %v, want a start error naming the component", err)
	}
	if _, err := os.Stat(s.PIDFile); !os.IsNotExist(err) {
		t.Errorf("PID file written for a process that never started: %v", err)
	}
	// The log is never opened through a link: the caller is root.
	s = spec(t, "linkedlog", "/bin/true")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, s.LogFile); err != nil {
		t.Fatal(err)
	}
	if h, err := Start(s); err == nil || !strings.Contains(err.Error(), "opening log") {
		if err == nil {
			<-h.Done()
		}
		t.Errorf("a log that is a link: err = %v, want a log error", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the log link's target now holds %q", b)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s = spec(t, "itself", self)
	if _, err := Start(s); err == nil || !strings.Contains(err.Error(), "the supervisor's own program") {
		t.Errorf("supervising the supervisor's program: err = %v, want it refused", err)
	}
	s = spec(t, "nolog", "/bin/true")
	s.LogFile = filepath.Join(t.TempDir(), "missing-dir", "x.log")
	if _, err := Start(s); err == nil || !strings.Contains(err.Error(), "opening log") {
		t.Errorf("err = %v, want a log error", err)
	}
}

func TestTailKeepsLastLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := Tail(p, 3)
	for _, want := range []string{"| line 97", "| line 98", "| line 99"} {
		if !strings.Contains(got, want) {
			t.Errorf("tail lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "line 96") {
		t.Errorf("tail has more than 3 lines:\n%s", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "none"), 3); !strings.Contains(got, "no log") {
		t.Errorf("missing log: %q", got)
	}
}

// The supervisor records how its component ended, and a supervisor killed
// outright takes its component along.
func TestSupervisor(t *testing.T) {
	s := spec(t, "exiter", "/bin/sh", "-c", "exit 7")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	<-h.Done()
	if log := Tail(s.LogFile, 3); !strings.Contains(log, "exiter exited: exit status 7") {
		t.Errorf("log lacks the exit:\n%s", log)
	}

	s = spec(t, "orphan", "/bin/sh", "-c", "echo pid=$$; exec sleep 60")
	h, err = Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	// The start header holds the command line too; only the output has
	// digits after "pid=".
	waitLog(t, s.LogFile, "| pid=")
	m := regexp.MustCompile(`\| pid=(\d+)`).FindStringSubmatch(Tail(s.LogFile, 3))
	child, _ := strconv.Atoi(m[1])
	childStarted, err := startTime(child)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := h.Ref.Component(); err != nil || c.PID != child {
		t.Errorf("Component() = %+v, %v; want pid %d", c, err, child)
	}
	if err := syscall.Kill(h.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if !waitGone(Ref{Name: "child", PID: child, Started: childStarted}, 5*time.Second) {
		t.Errorf("component %d outlived its killed supervisor", child)
	}
}

// OpenProc opens only the recorded process's directory, and what is opened
// through it later is that process's or nothing: once it has exited,
// lookups in the directory fail, whoever has the PID by then.
func TestOpenProc(t *testing.T) {
	s := spec(t, "holder", "/bin/sleep", "60")
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	stale := h.Ref
	stale.Started++
	if d, err := stale.OpenProc(); err == nil || !strings.Contains(err.Error(), "is gone") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("OpenProc of a PID whose process has another start time: %v, want a refusal", err)
	}
	dir, err := h.Ref.OpenProc()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, err := readAt(dir, "stat"); err != nil {
		t.Fatalf("opening below the directory of a live process: %v", err)
	}
	if err := h.Ref.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if _, err := readAt(dir, "stat"); err == nil {
		t.Fatal("the directory of an exited process still answers lookups")
	}
}

// Files given in Spec.ExtraFiles reach the component, through the
// supervisor, as descriptors 3 and on; the supervisor's own bookkeeping
// does not reach its environment.
func TestStartPassesExtraFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	s := spec(t, "writer", "/bin/sh", "-c", `echo "written env=${`+filesEnv+`:-unset}" >&3; exec sleep 60`)
	s.ExtraFiles = []*os.File{f}
	h, err := Start(s)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if string(b) == "written env=unset\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("descriptor 3 of the component: %q, want %q\n%s", b, "written env=unset\n", Tail(s.LogFile, 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The supervisor keeps no copy: it would outlive what the file stands
	// for (a namespace) as long as the component runs.
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", h.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", h.PID, e.Name())); err == nil && target == out {
			t.Errorf("the supervisor holds %s as descriptor %s", out, e.Name())
		}
	}
}

// Component is the child that runs the component's program: never a child
// that has exited (the Go runtime's pidfd probe is one, for a moment), nor
// one still running its parent's program (a fork before its exec). Here
// the parent is sleep, its children an unreaped true, a second sleep and
// tail.
func TestComponentIsTheExecutedChild(t *testing.T) {
	for _, tool := range []string{"/bin/true", "/bin/sleep", "/usr/bin/tail"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	for _, tc := range []struct {
		name, script string
		wantExe      string // "" for no component
	}{
		{"only a zombie and a fork", "/bin/true & /bin/sleep 60 & exec /bin/sleep 61", ""},
		{"the executed child", "/bin/true & /bin/sleep 60 & /usr/bin/tail -f /dev/null & exec /bin/sleep 61", "/usr/bin/tail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tc.script)
			// The children go with the parent: one process group.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			parent, err := Find("parent", cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			shell, err := filepath.EvalSymlinks("/bin/sh")
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Count(tc.script, "&")
			// Settled: the parent is sleep, with every child started and
			// run its program (none still the shell's fork), true exited.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", parent.PID))
				pids := childPIDs(t, parent)
				if exe == "/bin/sleep" || exe == "/usr/bin/sleep" {
					if len(pids) == want && !Runs(pids[0]) && !slices.ContainsFunc(pids[1:], func(pid int) bool {
						exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
						return exe == shell
					}) {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("never settled: parent runs %q, children %v", exe, pids)
				}
			}
			c, err := parent.Component()
			if tc.wantExe == "" {
				if err == nil {
					t.Fatalf("Component() = pid %d, want none", c.PID)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.PID)); exe != tc.wantExe {
				t.Errorf("Component() = pid %d running %q, want %s", c.PID, exe, tc.wantExe)
			}
		})
	}
}

// childPIDs lists parent's children as the kernel does, exited ones
// included, through its checked /proc directory.
func childPIDs(t *testing.T, parent Ref) []int {
	t.Helper()
	dir, err := parent.OpenProc()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	pids, err := childrenAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}
