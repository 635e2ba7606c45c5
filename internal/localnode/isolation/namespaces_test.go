package isolation

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/process/proctest"
	"github.com/critlet/critlet/test/testenv"
)

func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"unshare", "nsenter"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool+" (util-linux)", err)
	}
}

// netHolder starts a process holding a network namespace of its own, as
// the cluster's holders do, and returns it once it is in it (unshare execs
// sleep there).
func netHolder(t *testing.T) process.Ref {
	t.Helper()
	holder := proctest.Start(t, "holder", "unshare", "--net", "--", "/bin/sleep", "60")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ns, err := Open(holder, Net)
		if err == nil {
			ns.Close()
			return holder
		}
		if !errors.Is(err, ErrHostNamespace) || time.Now().After(deadline) {
			t.Fatalf("the holder never had a network namespace of its own: %v", err)
		}
	}
}

// containerLeader starts a process in namespaces of its own of every kind
// nsenter -a joins, as systemd-nspawn's child is, and returns it.
func containerLeader(t *testing.T) process.Ref {
	t.Helper()
	parent := proctest.Start(t, "nspawn", "unshare", "--fork", "--mount", "--propagation", "private",
		"--uts", "--ipc", "--net", "--pid", "--cgroup", "--", "/bin/sleep", "60")
	return proctest.Child(t, parent)
}

// Every namespace opened is checked, each against the host's of its kind:
// a process taken for a holder that shares one with the host is refused,
// naming the kind, whatever else it has of its own.
func TestOpenRefusesTheHostsNamespaces(t *testing.T) {
	needTools(t)
	host := proctest.Start(t, "host process", "/bin/sleep", "60")
	for _, k := range ContainerKinds {
		if ns, err := Open(host, k); !errors.Is(err, ErrHostNamespace) || !strings.Contains(err.Error(), "its "+string(k)+" namespace is the host's") {
			if ns != nil {
				ns.Close()
			}
			t.Errorf("Open of a host process's %s namespace: %v, want %v naming it", k, err, ErrHostNamespace)
		}
	}
	holder := netHolder(t)
	ns, err := Open(holder, Net)
	if err != nil {
		t.Fatalf("Open of a holder's own network namespace: %v", err)
	}
	ns.Close()
	for _, kinds := range [][]Kind{{Mount}, {Net, UTS}, ContainerKinds} {
		if ns, err := Open(holder, kinds...); !errors.Is(err, ErrHostNamespace) {
			if ns != nil {
				ns.Close()
			}
			t.Errorf("Open(%v) of a holder with only a network namespace of its own: %v, want %v", kinds, err, ErrHostNamespace)
		}
	}
}

// A holder recorded with a start time no process at its PID has (it died,
// its PID went to another process) is refused: nothing is opened of the
// process that has the PID now.
func TestOpenRefusesAStaleHolder(t *testing.T) {
	needTools(t)
	holder := netHolder(t)
	stale := holder
	stale.Started++
	if ns, err := Open(stale, Net); err == nil || errors.Is(err, ErrHostNamespace) || !strings.Contains(err.Error(), "is gone") {
		if ns != nil {
			ns.Close()
		}
		t.Errorf("Open of a holder whose PID another process has: %v, want it refused as gone", err)
	}
	if _, err := Open(holder); err == nil {
		t.Error("Open with no kind named opened something")
	}
	if _, err := Open(holder, Net, Net); err == nil {
		t.Error("Open with a kind named twice opened it")
	}
}

// A command entered with EnterArgs is in every namespace opened, in the
// directory named, holds none of the namespace descriptors, and keeps the
// descriptors given after them.
func TestEnterArgsEntersEveryNamespace(t *testing.T) {
	needTools(t)
	leader := containerLeader(t)
	ns, err := Open(leader, ContainerKinds...)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	dir := t.TempDir()
	enter, err := ns.EnterArgs(dir)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := os.Create(filepath.Join(t.TempDir(), "extra"))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extraFD := 3 + len(ns.Files())
	script := fmt.Sprintf(`for k in "$@"; do readlink /proc/self/ns/$k; done; pwd; ls -l /proc/self/fd/; echo written >&%d`, extraFD)
	args := append(enter, "/bin/sh", "-c", script, "sh")
	var want strings.Builder
	for _, k := range ContainerKinds {
		args = append(args, string(k))
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", leader.PID, k))
		if err != nil {
			t.Fatal(err)
		}
		want.WriteString(l + "\n")
	}
	want.WriteString(dir + "\n")
	cmd := exec.Command("nsenter", args...)
	cmd.ExtraFiles = append(ns.Files(), extra)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %q: %v\n%s", args, err, out)
	}
	if !strings.HasPrefix(string(out), want.String()) {
		t.Errorf("the command's namespaces and directory:\n%s\nwant the leader's and %s:\n%s", out, dir, want.String())
	}
	for _, k := range ContainerKinds {
		if strings.Contains(string(out), "-> "+string(k)+":[") {
			t.Errorf("the command holds a %s namespace descriptor:\n%s", k, out)
		}
	}
	if b, _ := os.ReadFile(extra.Name()); string(b) != "written\n" {
		t.Errorf("the descriptor given after the namespaces (%d): %q written, want %q", extraFD, b, "written\n")
	}
}

// Same tells namespaces of one kind apart by what they are, not by holder.
func TestSame(t *testing.T) {
	needTools(t)
	leader := containerLeader(t)
	a, err := Open(leader, ContainerKinds...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	holder := netHolder(t)
	b, err := Open(holder, Net)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []struct {
		x, y *Namespaces
		want bool
	}{{a, a, true}, {b, b, true}, {a, b, false}, {b, a, false}} {
		if same, err := c.x.Same(Net, c.y); err != nil || same != c.want {
			t.Errorf("Same(net) of %s and %s = %v, %v; want %v", c.x.holder.Name, c.y.holder.Name, same, err, c.want)
		}
	}
	if _, err := b.Same(Mount, a); err == nil {
		t.Error("Same of a kind one side did not open: no error")
	}
}
