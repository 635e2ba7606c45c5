package process_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/process/proctest"
)

// A PID is taken for a process's child only once the child's parent is
// confirmed to be that process, and only from a parent checked by its
// start time: a child listed a moment ago may have exited and its PID gone
// to a process that is not the parent's child (here a sibling), and a
// recorded parent whose PID was reused has no children of ours.
func TestChildren(t *testing.T) {
	parent := proctest.Start(t, "parent", "/bin/sh", "-c", "/bin/sleep 60 & wait")
	other := proctest.Start(t, "other", "/bin/sleep", "60")
	listed := proctest.Child(t, parent)
	child, err := process.Find("child", listed.PID)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := parent.Children(); err != nil || len(got) != 1 || got[0].PID != child.PID || got[0].Started != child.Started {
		t.Fatalf("Children() = %+v, %v; want the child %+v", got, err, child)
	}
	if c, err := parent.Child(child.PID); err != nil || c.Started != child.Started {
		t.Errorf("Child(%d) = %+v, %v; want the child", child.PID, c, err)
	}
	if c, err := parent.Child(other.PID); err == nil || !strings.Contains(err.Error(), "is not a child of parent") {
		t.Errorf("Child of a process that is not the parent's: %+v, %v; want a refusal", c, err)
	}
	stale := parent
	stale.Started++
	if got, err := stale.Children(); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("Children of a parent recorded with another start time: %+v, %v; want a refusal", got, err)
	}
	if c, err := stale.Child(child.PID); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("Child of a parent recorded with another start time: %+v, %v; want a refusal", c, err)
	}
}

// A child is taken for its parent's only while the parent's directory,
// opened when the parent was checked, shows it running still: a PID that
// is a process's parent now may have had it only since the check. Here the
// directory of a process that has exited stands for the parent's.
func TestChildAtOfAParentGone(t *testing.T) {
	parent := proctest.Start(t, "parent", "/bin/sh", "-c", "/bin/sleep 60 & wait")
	child := proctest.Child(t, parent)
	gone := proctest.Start(t, "gone", "/bin/sleep", "60")
	dir, err := gone.OpenProc()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := gone.Stop(0); err != nil {
		t.Fatal(err)
	}
	if c, err := parent.ChildAt(dir, child.PID); err == nil {
		t.Errorf("ChildAt with the parent's directory showing it exited: %+v, want a refusal", c)
	}
}

// A process's children are listed whichever of its threads forked them:
// each thread has a list of its own. Here the test's process, from a
// thread other than its main one.
func TestChildrenOfEveryThread(t *testing.T) {
	cmd := startOffMainThread(t, "/bin/sleep", "60")
	self, err := process.Find("test", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	children, err := self.Children()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(children, func(c process.Ref) bool { return c.PID == cmd.Process.Pid }) {
		t.Errorf("Children() = %+v lacks %d, forked by another thread than the main one", children, cmd.Process.Pid)
	}
}

// startOffMainThread starts args from a thread of this process other than
// its main one, kept until the test ends: a thread that exits hands its
// children on to another.
func startOffMainThread(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	started, release := make(chan error, 1), make(chan struct{})
	t.Cleanup(func() {
		close(release)
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	// Two threads locked at once, each its own goroutine's: the main
	// thread is one of them at most.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := func() {
		err := cmd.Start()
		if err == nil {
			tasks := fmt.Sprintf("/proc/self/task/%d/children", syscall.Gettid())
			if b, rerr := os.ReadFile(tasks); rerr != nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(cmd.Process.Pid)) {
				err = fmt.Errorf("%s is %q (%v), want the child there", tasks, b, rerr)
			}
		}
		started <- err
	}
	if syscall.Gettid() != os.Getpid() {
		start()
	} else {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start()
			<-release
		}()
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the child was not started")
	}
	return cmd
}
