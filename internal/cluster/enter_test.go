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

// A booted machine's systemd is checked to be in the network namespace it
// was booted with (by descriptor), before anything runs there: one that
// is not is halted.
func TestBootedMachineNetwork(t *testing.T) {
	needNamespaceTools(t)
	holder := testHolder(t, "n1 nic")
	nic, err := openNetns(holder)
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()

	// nspawn's child joined the holder's network namespace.
	sharedNet := slices.DeleteFunc(slices.Clone(machineLike), func(a string) bool { return a == "--net" })
	_, m := fakeMachine(t, append([]string{"nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", holder.PID), "--"}, sharedNet...)...)
	proctest.Child(t, *m.Boot)
	ns, err := openMachine(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkNetwork(m, ns, nic); err != nil {
		t.Errorf("a machine in the network namespace it was booted with: %v", err)
	}
	ns.Close()

	// nspawn's child in a network namespace of its own.
	c, m := fakeMachine(t, machineLike...)
	nspawn := *m.Boot
	proctest.Child(t, nspawn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.waitBooted(ctx, m, nic)
	if err == nil || !strings.Contains(err.Error(), "is not in the network namespace held by n1 nic") || !strings.Contains(err.Error(), "halted") {
		t.Errorf("waitBooted of a machine off its network: %v, want it halted", err)
	}
	if m.Boot != nil || nspawn.Alive() {
		t.Errorf("the machine off its network still runs (nspawn %+v recorded, alive %v)", m.Boot, nspawn.Alive())
	}
}
