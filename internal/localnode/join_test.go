package localnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/testenv"
)

func TestHideCommands(t *testing.T) {
	n := testNode(t)
	present := filepath.Join(t.TempDir(), "systemd-run")
	if err := os.WriteFile(present, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.l.path("mounts"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.cfg.HiddenCommands = []string{present, filepath.Join(t.TempDir(), "absent")}
	lines, err := n.hideCommands()
	if err != nil {
		t.Fatal(err)
	}
	want := "mount --bind " + shellQuote(n.l.mount("hidden-command")) + " " + shellQuote(present)
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines = %q, want only %q (an absent program needs no cover)", lines, want)
	}
	// The cover must be a file that neither exec nor a PATH lookup accepts.
	st, err := os.Stat(n.l.mount("hidden-command"))
	if err != nil || st.Size() != 0 || st.Mode().Perm()&0o111 != 0 {
		t.Fatalf("cover: %v, %v: want an empty, non-executable file", st, err)
	}

	n.cfg.HiddenCommands = []string{"systemd-run"}
	if _, err := n.hideCommands(); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("a relative program path: err = %v, want it refused", err)
	}
}

func TestRuntimeOnlyNetwork(t *testing.T) {
	lines := strings.Join(privateNetworkLines(), "\n")
	for _, want := range []string{"ip link set lo up", "ip addr add " + NodeIP + "/32", "ip route add default dev critlet-node"} {
		if !strings.Contains(lines, want) {
			t.Errorf("the private network's set-up lacks %q:\n%s", want, lines)
		}
	}
	// The bridge is the pods' gateway only inside a private network.
	for _, runtimeOnly := range []bool{false, true} {
		n := testNode(t)
		n.cfg.RuntimeOnly = runtimeOnly
		var conf struct {
			Plugins []struct {
				Type      string `json:"type"`
				IsGateway *bool  `json:"isGateway"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(n.renderCNIConfig()), &conf); err != nil {
			t.Fatalf("RuntimeOnly=%v: the CNI configuration is not JSON: %v", runtimeOnly, err)
		}
		if p := conf.Plugins[0]; p.Type != "bridge" || p.IsGateway == nil || *p.IsGateway != runtimeOnly {
			t.Errorf("RuntimeOnly=%v: bridge plugin %+v, want isGateway %v", runtimeOnly, p, runtimeOnly)
		}
	}
}

// startHolder starts, under a supervisor, a process standing for
// containerd, recorded in the node's PID file, and returns it once its
// component runs.
func startHolder(t *testing.T, n *Node, path string, args ...string) process.Ref {
	t.Helper()
	if err := os.MkdirAll(n.l.path("run"), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := process.Start(process.Spec{Name: Containerd, Path: path, Args: args, LogFile: filepath.Join(t.TempDir(), "log"), PIDFile: n.l.pidFile(Containerd)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(5 * time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := h.Ref.Component()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder's component never ran: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A PID file naming, as the node's namespace holder, a process in the
// host's mount namespace (forged, stale, or a containerd restart still in
// nsenter) lists no process to kill: every host process would be one.
// Nothing is done in that namespace either. Only the listing is called
// here, never the kill.
func TestHolderInHostNamespace(t *testing.T) {
	n := testNode(t)
	holder := startHolder(t, n, "/bin/sleep", "60")
	if host, err := inHostMountNamespace(holder.PID); err != nil || !host {
		t.Fatalf("inHostMountNamespace(%d) = %v, %v; want true", holder.PID, host, err)
	}
	pids, err := n.joinedProcesses()
	if !errors.Is(err, errHostNamespace) || len(pids) > 0 {
		t.Fatalf("joinedProcesses with a holder in the host's namespace = %d processes, %v; want none and errHostNamespace", len(pids), err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", holder.PID)) || !strings.Contains(err.Error(), n.l.pidFile(Containerd)) {
		t.Errorf("the refusal does not name the process and its PID file: %v", err)
	}
	if _, err := n.Command(context.Background(), "/", "/bin/true"); !errors.Is(err, errHostNamespace) {
		t.Errorf("Command in the host's namespace: %v, want errHostNamespace", err)
	}
	if err := n.unmountInNamespace(n.l.kubelet()); !errors.Is(err, errHostNamespace) {
		t.Errorf("unmounting in the host's namespace: %v, want errHostNamespace", err)
	}
}

// A holder in a mount namespace of its own is the node's: nobody else has
// joined it.
func TestHolderInItsOwnNamespace(t *testing.T) {
	_, err := exec.LookPath("unshare")
	testenv.Need(t, "unshare (util-linux)", err)
	n := testNode(t)
	startNamespaceHolder(t, n)
	pids, err := n.joinedProcesses()
	if err != nil || len(pids) > 0 {
		t.Errorf("joinedProcesses = %v, %v; want none and no error", pids, err)
	}
}

// A command in the node's namespace runs in the directory its caller names:
// joining a mount namespace would otherwise move it to /, the host's, where
// its cwd-relative files would land.
func TestCommandKeepsWorkingDirectory(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool+" (util-linux)", err)
	}
	n := testNode(t)
	startNamespaceHolder(t, n)
	dir := t.TempDir()
	cmd, err := n.Command(context.Background(), dir, "/bin/pwd")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pwd in the node's namespace: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != dir {
		t.Errorf("working directory in the node's namespace: %q, want the caller's %q", got, dir)
	}
}

// startNamespaceHolder starts a holder of a mount namespace of its own for
// n, and returns once it is in it (unshare execs sleep there).
func startNamespaceHolder(t *testing.T, n *Node) {
	t.Helper()
	holder := startHolder(t, n, "unshare", "--mount", "--propagation", "private", "--", "/bin/sleep", "60")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		host, err := inHostMountNamespace(holder.PID)
		if err != nil {
			t.Fatal(err)
		}
		if !host {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare never left the host's mount namespace")
		}
	}
}
