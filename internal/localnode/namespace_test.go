package localnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/test/testenv"
)

// The namespace is planned from the configuration and a view of the host
// without touching the disk; applying the plan makes what it lists.
func TestPlanNamespace(t *testing.T) {
	n := testNode(t)
	n.cfg.HiddenCommands = []string{"/usr/bin/systemd-run", "/usr/bin/absent"}
	n.cfg.PrivateDirs = []string{"/etc/kubernetes"}
	host := hostView{
		readFile: func(p string) ([]byte, error) {
			if p == "/proc/sys/net/ipv4/ip_forward" {
				return []byte("0\n"), nil
			}
			return nil, os.ErrNotExist
		},
		exists:   func(p string) bool { return p == "/usr/bin/systemd-run" || p == "/usr/sbin/iptables" },
		lookPath: func(string) (string, error) { return "/usr/sbin/iptables", nil },
	}
	p, err := planNamespace(n.cfg, n.l, host)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing was made while planning.
	if _, err := os.Stat(n.l.path("sysctl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("planning made %s: %v", n.l.path("sysctl"), err)
	}
	lines := strings.Join(p.lines, "\n")
	cover := n.l.mount("hidden-command")
	for _, want := range []string{
		"mount -t tmpfs -o mode=0711 critlet '/run/containerd'",
		"mount --bind " + shellQuote(filepath.Join(n.l.path("sysctl"), "net.ipv4.ip_forward")) + " '/proc/sys/net/ipv4/ip_forward'",
		"mount --bind " + shellQuote(n.l.kubeletRootMount()) + " '/var/lib/kubelet'",
		"mount --bind " + shellQuote(n.l.privateDir("/etc/kubernetes")) + " '/etc/kubernetes'",
		"mount --bind /bin/false '/usr/sbin/iptables'",
		"mount --bind " + shellQuote(cover) + " '/usr/bin/systemd-run'",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("the namespace's shell lacks %q:\n%s", want, lines)
		}
	}
	// A key the kernel lacks, a program the host lacks: nothing to cover.
	for _, absent := range []string{"/usr/bin/absent", "ip6tables", "kernel/panic"} {
		if strings.Contains(lines, absent) {
			t.Errorf("the shell covers %s, which the host lacks:\n%s", absent, lines)
		}
	}
	if !slices.Contains(p.hostDirs, "/etc/kubernetes") || !slices.Equal(p.private, []string{"/etc/kubernetes"}) {
		t.Errorf("private directory: hostDirs %q, private %q", p.hostDirs, p.private)
	}

	// Applied (host directories aside: they are the host's), the node's own
	// files are made; the cover must be a file that neither exec nor a PATH
	// lookup accepts.
	p.hostDirs, p.private = nil, nil
	if _, err := n.applyNamespace(p); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cover)
	if err != nil || st.Size() != 0 || st.Mode().Perm()&0o111 != 0 {
		t.Fatalf("cover: %v, %v: want an empty, non-executable file", st, err)
	}
	if b, err := os.ReadFile(filepath.Join(n.l.path("sysctl"), "net.ipv4.ip_forward")); err != nil || string(b) != "0\n" {
		t.Fatalf("sysctl mask: %q, %v; want the host's value", b, err)
	}

	n.cfg.HiddenCommands = []string{"systemd-run"}
	if _, err := planNamespace(n.cfg, n.l, host); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
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
	logFile := filepath.Join(t.TempDir(), "log")
	h, err := process.Start(process.Spec{Name: Containerd, Path: path, Args: args, LogFile: logFile, PIDFile: n.l.pidFile(Containerd)})
	if err != nil {
		t.Fatal(err)
	}
	// A holder that died early says why in its log.
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(logFile)
			t.Logf("%s %v (pid %d) wrote:\n%s", path, args, h.Ref.PID, out)
		}
	})
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
	if host, err := isolation.InHostMountNamespace(holder.PID); err != nil || !host {
		t.Fatalf("isolation.InHostMountNamespace(%d) = %v, %v; want true", holder.PID, host, err)
	}
	pids, err := n.joinedProcesses()
	if !errors.Is(err, isolation.ErrHostNamespace) || len(pids) > 0 {
		t.Fatalf("joinedProcesses with a holder in the host's namespace = %d processes, %v; want none and isolation.ErrHostNamespace", len(pids), err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", holder.PID)) || !strings.Contains(err.Error(), n.l.pidFile(Containerd)) {
		t.Errorf("the refusal does not name the process and its PID file: %v", err)
	}
	if _, err := n.Command(context.Background(), "/", "/bin/true"); !errors.Is(err, isolation.ErrHostNamespace) {
		t.Errorf("Command in the host's namespace: %v, want isolation.ErrHostNamespace", err)
	}
	if err := n.unmountInNamespace(n.l.kubelet()); !errors.Is(err, isolation.ErrHostNamespace) {
		t.Errorf("unmounting in the host's namespace: %v, want isolation.ErrHostNamespace", err)
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
// n (and a network namespace for a RuntimeOnly n), and returns it once it
// is in it (unshare execs sleep there).
func startNamespaceHolder(t *testing.T, n *Node) process.Ref {
	t.Helper()
	args := []string{"--mount", "--propagation", "private"}
	if n.cfg.RuntimeOnly {
		args = append(args, "--net")
	}
	holder := startHolder(t, n, "unshare", append(args, "--", "/bin/sleep", "60")...)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		host, err := isolation.InHostMountNamespace(holder.PID)
		if err != nil {
			t.Fatal(err)
		}
		if !host {
			return holder
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare never left the host's mount namespace")
		}
	}
}

// A command is entered into the namespaces that were checked when it was
// made, never into those of whoever has the holder's PID when it starts:
// here the holder dies after Command and a host process takes its PID
// before the command runs. Entering by /proc/PID/ns/* then would run the
// command in the host's namespaces.
func TestCommandEntersTheNamespacesItChecked(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool+" (util-linux)", err)
	}
	n := testNode(t)
	n.cfg.RuntimeOnly = true
	holder := startNamespaceHolder(t, n)
	nodeNS := namespaceLinks(t, strconv.Itoa(holder.PID))
	hostNS := namespaceLinks(t, "self")
	cmd, err := n.Command(context.Background(), t.TempDir(), "/bin/readlink", "/proc/self/ns/mnt", "/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(holder.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, holder.PID)
	takePID(t, holder.PID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the command: %v\n%s", err, out)
	}
	switch got := string(out); got {
	case nodeNS:
	case hostNS:
		t.Fatalf("the command ran in the host's namespaces (%q): it entered those of the process that took the holder's PID", strings.Fields(got))
	default:
		t.Fatalf("the command ran in namespaces %q, want the node's %q", strings.Fields(got), strings.Fields(nodeNS))
	}
}

// The command started in the node keeps none of the namespace descriptors
// nsenter was given.
func TestCommandLeavesNoNamespaceDescriptors(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool+" (util-linux)", err)
	}
	n := testNode(t)
	n.cfg.RuntimeOnly = true
	startNamespaceHolder(t, n)
	cmd, err := n.Command(context.Background(), t.TempDir(), "/bin/ls", "-l", "/proc/self/fd/")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ls in the node: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "mnt:[") || strings.Contains(string(out), "net:[") {
		t.Errorf("the command holds a namespace descriptor:\n%s", out)
	}
}

// namespaceLinks is readlink's output for pid's mount and network
// namespaces.
func namespaceLinks(t *testing.T, pid string) string {
	t.Helper()
	var b strings.Builder
	for _, ns := range []string{"mnt", "net"} {
		l, err := os.Readlink(filepath.Join("/proc", pid, "ns", ns))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// waitNoProcess waits until pid is free: exited and reaped.
func waitNoProcess(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still taken 10s after SIGKILL", pid)
		}
	}
}

// takePID starts a process in the host's namespaces with the PID pid, as
// the kernel may hand out a dead process's PID: the last PID handed out is
// set just below it (ns_last_pid, root's), then a process started. A
// single-threaded shell does both, so no thread of the test binary takes
// the PID between them; another process on the machine still may, which
// is retried until a deadline rather than a count (a busy machine forks
// often).
func takePID(t *testing.T, pid int) {
	t.Helper()
	const lastPID = "/proc/sys/kernel/ns_last_pid"
	f, err := os.OpenFile(lastPID, os.O_WRONLY, 0)
	testenv.Need(t, "setting the next PID ("+lastPID+", root)", err)
	f.Close()
	const script = `echo "$1" > ` + lastPID + ` || exit 1
/bin/sleep 60 &
echo $!
wait`
	var got []int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		c := exec.Command("/bin/sh", "-c", script, "sh", strconv.Itoa(pid-1))
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() }
		var child int
		if _, err := fmt.Fscan(out, &child); err != nil {
			stop()
			t.Fatalf("the shell taking pid %d printed no PID: %v", pid, err)
		}
		if child == pid {
			t.Cleanup(stop)
			return
		}
		stop()
		if len(got) < 10 {
			got = append(got, child)
		}
	}
	t.Fatalf("no process could be started with pid %d in 30s (first PIDs handed out: %v)", pid, got)
}

// Unmounting in the node's namespace reads the holder's mounts through its
// checked /proc directory and unmounts through the namespace opened from
// it: a mount made there below the directory is gone afterwards, and the
// host never had it.
func TestUnmountInNamespace(t *testing.T) {
	for _, tool := range []string{"unshare", "nsenter"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool+" (util-linux)", err)
	}
	n := testNode(t)
	holder := startNamespaceHolder(t, n)
	dir := t.TempDir()
	under := filepath.Join(dir, "volume")
	if err := os.Mkdir(under, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder.PID), "--", "mount", "-t", "tmpfs", "critlet-test", under).CombinedOutput(); err != nil {
		t.Fatalf("mounting in the holder's namespace: %v: %s", err, out)
	}
	mountinfo := fmt.Sprintf("/proc/%d/mountinfo", holder.PID)
	if m, err := isolation.MountsUnder(mountinfo, dir); err != nil || !slices.Equal(m, []string{under}) {
		t.Fatalf("the holder's mounts under %s: %v, %v; want %s", dir, m, err, under)
	}
	if err := n.unmountInNamespace(dir); err != nil {
		t.Fatal(err)
	}
	if m, err := isolation.MountsUnder(mountinfo, dir); err != nil || len(m) > 0 {
		t.Errorf("the holder's mounts under %s after unmounting: %v, %v; want none", dir, m, err)
	}
}
