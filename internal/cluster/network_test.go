package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/process/proctest"
	"github.com/critlet/critlet/test/testenv"
)

func needNamespaceTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"unshare", "nsenter", "ip"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool, err)
	}
}

// testHolder holds a network namespace as the cluster's holders do
// (holdNetns), stopped when the test ends.
func testHolder(t *testing.T, name string) process.Ref {
	t.Helper()
	h, err := holdNetns(context.Background(), name, filepath.Join(t.TempDir(), "holder.log"))
	t.Cleanup(func() { _ = h.Stop(time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	// Checked here too, not only by the code under test: were that check
	// broken, the tests would otherwise make their bridge and links on the
	// host.
	if netnsLink(t, h.PID) == netnsLink(t, os.Getpid()) {
		t.Fatalf("holder %s (pid %d) is in the host's network namespace", name, h.PID)
	}
	return h
}

// nsLink is the name of pid's namespace of kind.
func nsLink(t *testing.T, pid int, kind isolation.Kind) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func netnsLink(t *testing.T, pid int) string { return nsLink(t, pid, isolation.Net) }

// testNetns is a holder's network namespace, opened as the code under test
// opens it and closed when the test ends.
func testNetns(t *testing.T, name string) (process.Ref, *isolation.Namespaces) {
	t.Helper()
	holder := testHolder(t, name)
	ns, err := openNetns(holder)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return holder, ns
}

// outputInNetns is what c writes run in holder's network namespace,
// entered through descriptors as the code under test enters it.
func outputInNetns(t *testing.T, holder process.Ref, c ...string) (string, error) {
	t.Helper()
	ns, err := openNetns(holder)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cmd, err := netnsCommand(context.Background(), ns, nil, c...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A holder recorded for a namespace is entered only while it is that
// process and in a namespace of its own: one whose PID another process
// has now (another start time), or one in the host's network namespace,
// is refused, and the command never runs.
func TestInNetnsRefuses(t *testing.T) {
	needNamespaceTools(t)
	host := proctest.Start(t, "hub", "/bin/sleep", "60")
	stale := testHolder(t, "hub")
	stale.Started++
	for name, c := range map[string]struct {
		holder process.Ref
		want   string
	}{
		"a holder whose PID is reused":     {stale, "is gone"},
		"a holder in the host's namespace": {host, isolation.ErrHostNamespace.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			err := inNetns(context.Background(), c.holder, []string{"touch", marker})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("inNetns: %v, want a refusal saying %q", err, c.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// A machine's eth0 goes to the namespace of its holder as checked, through
// a descriptor: never to whichever process has the holder's PID. Here the
// recorded holder is gone and its PID is another holder's, whose namespace
// must stay untouched.
func TestPlugIn(t *testing.T) {
	needNamespaceTools(t)
	ctx := context.Background()
	hub := testHolder(t, "hub")
	if err := setUpHub(ctx, hub); err != nil {
		t.Fatal(err)
	}
	nic := testHolder(t, "n1 nic")
	m := &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), NIC: nic}
	if err := plugIn(ctx, hub, m); err != nil {
		t.Fatal(err)
	}
	out, err := outputInNetns(t, nic, "ip", "-br", "addr", "show", "eth0")
	if err != nil || !strings.Contains(out, MachineAddr(1)+"/24") {
		t.Errorf("eth0 in the machine's namespace: %q, %v; want it with %s", out, err, MachineAddr(1))
	}

	other := testHolder(t, "other")
	stale := &Machine{Name: "n2", Index: 2, Addr: MachineAddr(2), NIC: process.Ref{Name: "n2 nic", PID: other.PID, Started: other.Started + 1}}
	if err := plugIn(ctx, hub, stale); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("plugIn with a holder whose PID is reused: %v, want a refusal", err)
	}
	out, err = outputInNetns(t, other, "ip", "-br", "link")
	if err != nil || strings.Contains(out, "eth0") {
		t.Errorf("links in the namespace of the process with the stale holder's PID: %q, %v; want no eth0", out, err)
	}
	out, err = outputInNetns(t, hub, "ip", "-br", "link")
	if err != nil || strings.Contains(out, "m2") {
		t.Errorf("the hub's links: %q, %v; want no port for the refused machine", out, err)
	}
}
