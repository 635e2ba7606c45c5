package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/process/proctest"
)

// machineLike stands in for systemd-nspawn: its child is in namespaces of
// its own of every kind a machine's systemd has (its PID namespace's first
// process).
var machineLike = []string{"unshare", "--fork", "--mount", "--propagation", "private", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--", "/bin/sleep", "60"}

// fakeMachine records machine n1, in a cluster of its own, as booted by
// the process args, standing in for systemd-nspawn.
func fakeMachine(t *testing.T, args ...string) (*Cluster, *Machine) {
	t.Helper()
	nspawn := proctest.Start(t, "n1", args...)
	m := &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), Boot: &nspawn}
	return &Cluster{dir: t.TempDir(), rec: Record{Machines: []*Machine{m}}}, m
}

// A command in a machine runs in every namespace of its systemd, as
// nsenter -a ran it: in the machine's /, with the environment of a root
// shell there and the standard input given, and none of the namespace
// descriptors.
func TestExecInputEntersTheMachine(t *testing.T) {
	needNamespaceTools(t)
	c, m := fakeMachine(t, machineLike...)
	leader := proctest.Child(t, *m.Boot)
	out, err := c.ExecInput(context.Background(), "n1", []byte("typed\n"), "sh", "-c",
		`cat; pwd; echo "HOME=$HOME"; for k in "$@"; do readlink /proc/self/ns/$k; done; ls -l /proc/self/fd/`,
		"sh", "mnt", "uts", "ipc", "net", "pid", "cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := "typed\n/\nHOME=/root\n"
	for _, k := range isolation.ContainerKinds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", leader.PID, k))
		if err != nil {
			t.Fatal(err)
		}
		want += l + "\n"
	}
	if !strings.HasPrefix(out, want) {
		t.Errorf("the command in the machine wrote:\n%s\nwant its input, /, root's home and the machine's namespaces first:\n%s", out, want)
	}
	for _, k := range isolation.ContainerKinds {
		if strings.Contains(out, "-> "+string(k)+":[") {
			t.Errorf("the command holds a %s namespace descriptor:\n%s", k, out)
		}
	}
}

// Nothing is run in a machine unless its systemd-nspawn is the recorded
// process and the child found is in namespaces of its own: a child of
// nspawn's in the host's namespaces would have the command run on the
// host as root.
func TestExecInputRefuses(t *testing.T) {
	needNamespaceTools(t)
	for name, c := range map[string]struct {
		nspawn []string
		stale  bool
		want   error
		text   string
	}{
		"nspawn's child in the host's namespaces": {nspawn: []string{"/bin/sh", "-c", "/bin/sleep 60 & wait"}, want: isolation.ErrHostNamespace},
		"nspawn gone, its PID another process's":  {nspawn: machineLike, stale: true, text: "is gone"},
	} {
		t.Run(name, func(t *testing.T) {
			cl, m := fakeMachine(t, c.nspawn...)
			proctest.Child(t, *m.Boot)
			if c.stale {
				m.Boot.Started++
			}
			marker := filepath.Join(t.TempDir(), "ran")
			_, err := cl.ExecInput(context.Background(), "n1", nil, "touch", marker)
			if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("ExecInput: %v, want a refusal (%v %q)", err, c.want, c.text)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// without drops the options given from args.
func without(args []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return slices.Contains(drop, a) })
}

// A booted machine's systemd is checked to be in the network namespace it
// was booted with (by descriptor), before anything runs there: one that
// is not is halted, its systemd killed with nspawn. So is one in the
// host's network namespace, at once: its systemd has its cgroup namespace,
// which nspawn makes last, so that is final.
func TestBootedMachineNetwork(t *testing.T) {
	needNamespaceTools(t)
	_, nic := testNetns(t, "n1 nic")

	// nspawn's child joined the holder's network namespace.
	// The namespace through this process's own descriptor of it, never the
	// holder's PID.
	_, m := fakeMachine(t, append([]string{"nsenter", fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), nic.Files()[0].Fd()), "--"}, without(machineLike, "--net")...)...)
	proctest.Child(t, *m.Boot)
	ns, err := openMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkNetwork(m, ns, nic); err != nil {
		t.Errorf("a machine in the network namespace it was booted with: %v", err)
	}
	ns.Close()

	for name, c := range map[string]struct {
		nspawn []string
		want   string
	}{
		"of its own": {machineLike, "is not in the network namespace held by n1 nic"},
		"the host's": {without(machineLike, "--net"), "its net namespace is the host's"},
	} {
		t.Run(name, func(t *testing.T) {
			cl, m := fakeMachine(t, c.nspawn...)
			nspawn := *m.Boot
			sd := proctest.Child(t, nspawn)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := cl.waitBooted(ctx, m, nic)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "halted") {
				t.Errorf("waitBooted of a machine off its network: %v, want it halted (%q)", err, c.want)
			}
			if m.Boot != nil || nspawn.Alive() || sd.Alive() {
				t.Errorf("the machine off its network still runs (nspawn %+v recorded, alive %v, its systemd alive %v)", m.Boot, nspawn.Alive(), sd.Alive())
			}
		})
	}
}

// A power cut kills the machine's systemd even when it cannot be entered
// (here in the host's IPC namespace): nspawn killed alone would leave it
// running.
func TestPowerCutKillsASystemdItCannotEnter(t *testing.T) {
	needNamespaceTools(t)
	c, m := fakeMachine(t, without(machineLike, "--ipc")...)
	nspawn := *m.Boot
	sd := proctest.Child(t, nspawn)
	if ns, err := openMachine(m); err == nil {
		ns.Close()
		t.Fatal("openMachine let a systemd in the host's IPC namespace be entered")
	} else if !errors.Is(err, isolation.ErrHostNamespace) {
		t.Fatalf("openMachine of a systemd in the host's IPC namespace: %v, want a refusal", err)
	}
	start := time.Now()
	if err := c.PowerCut(context.Background(), "n1"); err != nil {
		t.Error(err)
	}
	if m.Boot != nil || nspawn.Alive() || sd.Alive() {
		t.Errorf("after the power cut, nspawn recorded %+v, alive %v, its systemd alive %v", m.Boot, nspawn.Alive(), sd.Alive())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the power cut took %s", d)
	}
}

// The machine's systemd is nspawn's child in a PID namespace of its own,
// whichever of its children that is: here the second, after one in the
// host's namespaces.
func TestMachineSystemdIsAnyChild(t *testing.T) {
	needNamespaceTools(t)
	// The shell starts a sleep in its own, the host's, namespaces, then
	// execs unshare, whose child has namespaces of its own: both are
	// children of the one process.
	cl, m := fakeMachine(t, append([]string{"/bin/sh", "-c", `/bin/sleep 60 & exec "$@"`, "sh"}, machineLike...)...)
	var children []process.Ref
	for deadline := time.Now().Add(10 * time.Second); len(children) < 2; time.Sleep(10 * time.Millisecond) {
		var err error
		if children, err = m.Boot.Children(); err != nil || time.Now().After(deadline) {
			t.Fatalf("nspawn's stand-in has children %+v (%v), want 2", children, err)
		}
	}
	sd, err := machineSystemd(m)
	if err != nil || sd.PID != children[1].PID {
		t.Fatalf("machineSystemd = %+v, %v; want the second child %+v", sd, err, children[1])
	}
	if out, err := cl.Exec(context.Background(), "n1", "readlink", "/proc/self/ns/pid"); err != nil || strings.TrimSpace(out) != nsLink(t, sd.PID, isolation.PID) {
		t.Errorf("Exec in the machine: %q, %v; want it in the PID namespace %s", out, err, nsLink(t, sd.PID, isolation.PID))
	}
}

// A machine whose systemd has no cgroup namespace of its own yet may still
// be joining its network namespace: waitBooted waits, and halts nothing.
func TestBootingMachineIsNotHaltedEarly(t *testing.T) {
	needNamespaceTools(t)
	_, nic := testNetns(t, "n1 nic")
	c, m := fakeMachine(t, without(machineLike, "--net", "--cgroup")...)
	nspawn := *m.Boot
	sd := proctest.Child(t, nspawn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.waitBooted(ctx, m, nic); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waitBooted of a machine not yet in its cgroup namespace: %v, want it waited for", err)
	}
	if m.Boot == nil || !nspawn.Alive() || !sd.Alive() {
		t.Errorf("the booting machine was halted (nspawn %+v recorded, alive %v, its systemd alive %v)", m.Boot, nspawn.Alive(), sd.Alive())
	}
}
