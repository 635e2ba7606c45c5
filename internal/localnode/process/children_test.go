package process_test

import (
	"strings"
	"testing"

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
