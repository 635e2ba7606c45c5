package localnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// The node's mount namespace is created with containerd and joined by every
// kubelet the node runs. One namespace for both matters: the kubelet mounts
// pods' secret, projected and memory-backed volumes, and runc, started by
// containerd, must see those mounts to put them in containers. Inside it,
// the host paths the node would otherwise change are replaced by the node's
// own (see planNamespace); the namespace, and every mount in it, is gone
// once the node's last process exits.

// namespacePlan is the node's namespace worked out from its configuration
// and what the host has, before anything is made (planNamespace writes
// nothing); applyNamespace then makes it, in this order: the private
// directories recorded, the host mount points, the node's directories and
// files. What remains is the shell that mounts it all.
type namespacePlan struct {
	// private are the configured PrivateDirs, recorded before their mount
	// points are made so that Down accepts those.
	private []string
	// hostDirs are mount points on the host, made (and recorded) if missing.
	hostDirs []string
	// dirs and files are the node's own, under its state directory.
	dirs  []string
	files []nodeFile
	// lines prepare the namespace, before containerd is exec'd.
	lines []string
}

// nodeFile is a file of the node's with its contents.
type nodeFile struct {
	path string
	data []byte
}

// hostView is what planning reads of the host.
type hostView struct {
	// readFile reads a /proc/sys key's current value.
	readFile func(string) ([]byte, error)
	// exists reports whether a program is on the host.
	exists func(string) bool
	// lookPath finds a program in PATH.
	lookPath func(string) (string, error)
}

// theHost is the host this process runs on.
var theHost = hostView{
	readFile: os.ReadFile,
	exists:   func(p string) bool { _, err := os.Stat(p); return err == nil },
	lookPath: exec.LookPath,
}

// planNamespace plans the node's namespace. Inside it, the host paths the
// node would otherwise change are replaced by the node's own:
//   - containerd 1.6 keeps shim sockets under /run/containerd and network
//     namespaces under /run/netns whatever its configuration says, and its
//     CNI library caches results in /var/lib/cni: tmpfs over each (not
//     /tmp: the state directory, and a full node's runtime handlers, may be
//     in it);
//   - the sysctls the kubelet and CNI set: each masked by a file of the
//     node's holding the host's value, so they change the file;
//   - /var/log (the kubelet's pod and container logs) and /var/lib/kubelet
//     (its device-plugin sockets, and with upstream's suite its whole root),
//     and the configured PrivateDirs: bind mounts of the node's directories;
//   - iptables and ip6tables: /bin/false, as the kubelet's chains serve
//     kube-proxy and the like, which the node does not run, and the CNI
//     bridge needs none without masquerading;
//   - the configured HiddenCommands: covered by an empty file of the
//     node's, which exec and PATH lookups reject (a program the host lacks
//     needs no cover).
func planNamespace(cfg Config, l layout, host hostView) (namespacePlan, error) {
	var p namespacePlan
	p.lines = []string{"set -e"}
	if cfg.RuntimeOnly {
		p.lines = append(p.lines, privateNetworkLines()...)
	}
	for _, d := range []string{"/run/containerd", "/run/netns", "/var/lib/cni"} {
		p.hostDirs = append(p.hostDirs, d)
		p.lines = append(p.lines, "mount -t tmpfs -o mode=0711 critlet "+shellQuote(d))
	}
	p.dirs = append(p.dirs, l.path("sysctl"))
	for _, k := range append([]string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"}, kubeletSysctls...) {
		src := filepath.Join("/proc/sys", k)
		v, err := host.readFile(src)
		if err != nil {
			continue // not on this kernel: nothing to protect
		}
		f := filepath.Join(l.path("sysctl"), strings.ReplaceAll(k, "/", "."))
		p.files = append(p.files, nodeFile{f, v})
		p.lines = append(p.lines, "mount --bind "+shellQuote(f)+" "+shellQuote(src))
	}
	p.hostDirs = append(p.hostDirs, "/var/lib/kubelet")
	p.dirs = append(p.dirs, l.devicePluginDir())
	binds := []struct{ src, dst string }{{l.mount("var-log"), "/var/log"}, {l.kubeletRootMount(), "/var/lib/kubelet"}}
	p.private = cfg.PrivateDirs
	for _, d := range cfg.PrivateDirs {
		p.hostDirs = append(p.hostDirs, d)
		binds = append(binds, struct{ src, dst string }{l.privateDir(d), d})
	}
	for _, m := range binds {
		p.dirs = append(p.dirs, m.src)
		p.lines = append(p.lines, "mount --bind "+shellQuote(m.src)+" "+shellQuote(m.dst))
	}
	if ipt, err := host.lookPath("iptables"); err == nil {
		for _, bin := range []string{ipt, filepath.Join(filepath.Dir(ipt), "ip6tables")} {
			if host.exists(bin) {
				p.lines = append(p.lines, "mount --bind /bin/false "+shellQuote(bin))
			}
		}
	}
	if len(cfg.HiddenCommands) > 0 {
		cover := l.mount("hidden-command")
		p.files = append(p.files, nodeFile{cover, nil})
		for _, c := range cfg.HiddenCommands {
			if !filepath.IsAbs(c) {
				return namespacePlan{}, fmt.Errorf("node namespace: hidden command %q is not an absolute path", c)
			}
			if host.exists(c) {
				p.lines = append(p.lines, "mount --bind "+shellQuote(cover)+" "+shellQuote(c))
			}
		}
	}
	return p, nil
}

// applyNamespace makes what p needs and returns its shell lines. Nothing is
// written through a link, and each host directory made is recorded first.
func (n *Node) applyNamespace(p namespacePlan) ([]string, error) {
	if err := stateguard.MakeHostDirs(n.l.root, p.private, p.hostDirs); err != nil {
		return nil, err
	}
	for _, d := range p.dirs {
		if err := n.l.mkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
	}
	for _, f := range p.files {
		if err := n.l.mkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
		if err := n.l.writeFile(f.path, f.data, 0o644); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
	}
	return p.lines, nil
}

// privateNetworkLines bring up a RuntimeOnly node's network namespace:
// loopback, and NodeIP on one end of a veth pair that carries the default
// route, so that a kubelet finds a node address and an API server an
// address to advertise. The pair lives and dies with the namespace.
func privateNetworkLines() []string {
	return []string{
		"ip link set lo up",
		"ip link add critlet-node type veth peer name critlet-peer",
		"ip addr add " + NodeIP + "/32 dev critlet-node",
		"ip link set critlet-peer up",
		"ip link set critlet-node up",
		"ip route add default dev critlet-node",
	}
}

// openNodeNamespaces opens the namespaces of containerd's process, the
// node's (isolation.OpenNamespaces). One in the host's mount namespace (a
// stale or forged PID file, or a containerd restart still in nsenter) holds
// no node's namespace: what would be done in it, killing what shares it
// above all, would be done to the host. That is isolation.ErrHostNamespace.
func (n *Node) openNodeNamespaces() (*isolation.Namespaces, error) {
	ref, err := n.runningComponent(Containerd)
	if err != nil {
		return nil, fmt.Errorf("%w: the node's mount namespace is gone (run local-node up)", err)
	}
	ns, err := isolation.OpenNamespaces(ref, n.cfg.RuntimeOnly)
	if errors.Is(err, isolation.ErrHostNamespace) {
		return nil, fmt.Errorf("%w: %s's process, pid %d, named by %s, is there (a stale or forged PID file, or containerd restarting); nothing is done in or to that namespace",
			isolation.ErrHostNamespace, Containerd, ref.PID, n.l.pidFile(Containerd))
	}
	if err != nil {
		return nil, fmt.Errorf("the node's namespaces: %w", err)
	}
	return ns, nil
}

// Command returns a command that runs inside the node's namespaces: its
// mount namespace and, for a RuntimeOnly node, its network, in directory
// dir (absolute). Processes started so are the node's: Down kills any that
// are left. The namespaces are opened here, from their holder, and handed
// to nsenter as cmd.ExtraFiles (descriptors 3 and 4): a caller adding
// files appends to them. The command itself does not inherit them.
func (n *Node) Command(ctx context.Context, dir, path string, args ...string) (*exec.Cmd, error) {
	if strings.Contains(path, "/") && !filepath.IsAbs(path) {
		return nil, fmt.Errorf("command %q in the node: a relative path would name a file of the command's directory there (%s)", path, dir)
	}
	ns, err := n.openNodeNamespaces()
	if err != nil {
		return nil, err
	}
	enter, err := ns.EnterArgs(dir)
	if err != nil {
		ns.Close()
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(enter, path), args...)...)
	// Once started, the command holds its own copies; this process's are
	// closed when cmd is collected (or by a caller, once it has started).
	cmd.ExtraFiles = ns.Files()
	ns.CloseProc()
	// The command and whatever it starts form one process group, which a
	// cancelled context kills whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// unmountInNamespace removes the mounts below dir in the node's namespace,
// deepest first: a stopped kubelet leaves its own there.
func (n *Node) unmountInNamespace(dir string) error {
	ns, err := n.openNodeNamespaces()
	if err != nil {
		return err
	}
	defer ns.Close()
	return ns.Unmount(dir)
}

// joinedProcesses lists the processes that joined the node's mount
// namespace (isolation.Namespaces.Joined). A holder in the host's
// namespace lists nothing and is an error: every host process would be
// listed.
func (n *Node) joinedProcesses() ([]int, error) {
	ns, err := n.openNodeNamespaces()
	if errors.Is(err, isolation.ErrHostNamespace) {
		return nil, err
	}
	if err != nil {
		return nil, nil // no namespace, nobody in it
	}
	defer ns.Close()
	return ns.Joined()
}

// killJoined kills every process that joined the node's namespace and
// waits until they are gone.
func (n *Node) killJoined() error {
	return isolation.KillUntilGone("in the node's namespace", n.joinedProcesses)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
