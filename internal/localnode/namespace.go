package localnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/critlet/critlet/internal/localnode/process"
)

// The node's mount namespace is created with containerd and joined by every
// kubelet the node runs. One namespace for both matters: the kubelet mounts
// pods' secret, projected and memory-backed volumes, and runc, started by
// containerd, must see those mounts to put them in containers. Inside it,
// the host paths the node would otherwise change are replaced by the node's
// own (see namespaceScript); the namespace, and every mount in it, is gone
// once the node's last process exits.

// namespaceScript returns the shell lines that prepare the namespace.
func (n *Node) namespaceScript() ([]string, error) {
	lines := []string{"set -e"}
	if n.cfg.RuntimeOnly {
		lines = append(lines, privateNetworkLines()...)
	}
	// containerd 1.6 keeps shim sockets under /run/containerd and network
	// namespaces under /run/netns whatever its configuration says, and its
	// CNI library caches results in /var/lib/cni. (Not /tmp: the state
	// directory, and a full node's runtime handlers, may be in it.)
	for _, d := range []string{"/run/containerd", "/run/netns", "/var/lib/cni"} {
		if err := n.hostDir(d); err != nil {
			return nil, err
		}
		lines = append(lines, "mount -t tmpfs -o mode=0711 critlet "+shellQuote(d))
	}
	masks, err := n.maskSysctls(append([]string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"}, kubeletSysctls...))
	if err != nil {
		return nil, err
	}
	lines = append(lines, masks...)
	// The kubelet writes /var/log/containers and /var/log/pods, and keeps
	// its device-plugin sockets, and with upstream's suite its whole root,
	// in /var/lib/kubelet.
	if err := n.hostDir("/var/lib/kubelet"); err != nil {
		return nil, err
	}
	if err := n.l.mkdirAll(n.l.devicePluginDir(), 0o755); err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	binds := []struct{ src, dst string }{{n.l.mount("var-log"), "/var/log"}, {n.l.kubeletRootMount(), "/var/lib/kubelet"}}
	// Recorded first: Down, reading the record, accepts the mount points
	// made for them.
	if err := n.l.record("private", n.cfg.PrivateDirs...); err != nil {
		return nil, err
	}
	for _, d := range n.cfg.PrivateDirs {
		if err := n.hostDir(d); err != nil {
			return nil, err
		}
		binds = append(binds, struct{ src, dst string }{n.l.privateDir(d), d})
	}
	for _, m := range binds {
		if err := n.l.mkdirAll(m.src, 0o755); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
		lines = append(lines, "mount --bind "+shellQuote(m.src)+" "+shellQuote(m.dst))
	}
	// The kubelet's iptables chains serve kube-proxy and the like, which the
	// node does not run, and the CNI bridge needs none without masquerading:
	// iptables is /bin/false here, so nothing touches the host's rules.
	if ipt, err := exec.LookPath("iptables"); err == nil {
		for _, bin := range []string{ipt, filepath.Join(filepath.Dir(ipt), "ip6tables")} {
			if _, err := os.Stat(bin); err == nil {
				lines = append(lines, "mount --bind /bin/false "+shellQuote(bin))
			}
		}
	}
	hidden, err := n.hideCommands()
	if err != nil {
		return nil, err
	}
	return append(lines, hidden...), nil
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

// hideCommands returns the lines that cover each of the configured host
// programs with an empty file of the node's, which exec and PATH lookups
// reject. A program the host does not have needs no cover.
func (n *Node) hideCommands() ([]string, error) {
	if len(n.cfg.HiddenCommands) == 0 {
		return nil, nil
	}
	cover := n.l.mount("hidden-command")
	if err := n.l.writeFile(cover, nil, 0o644); err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	var lines []string
	for _, c := range n.cfg.HiddenCommands {
		if !filepath.IsAbs(c) {
			return nil, fmt.Errorf("node namespace: hidden command %q is not an absolute path", c)
		}
		if _, err := os.Stat(c); err != nil {
			continue
		}
		lines = append(lines, "mount --bind "+shellQuote(cover)+" "+shellQuote(c))
	}
	return lines, nil
}

// maskSysctls writes, for each /proc/sys key, a file holding the host's
// current value, and returns the lines that bind-mount the files over the
// keys: the node's processes then change the files, not the kernel.
func (n *Node) maskSysctls(keys []string) ([]string, error) {
	dir := n.l.path("sysctl")
	if err := n.l.mkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	var lines []string
	for _, k := range keys {
		src := filepath.Join("/proc/sys", k)
		v, err := os.ReadFile(src)
		if err != nil {
			continue // not on this kernel: nothing to protect
		}
		f := filepath.Join(dir, strings.ReplaceAll(k, "/", "."))
		if err := n.l.writeFile(f, v, 0o644); err != nil {
			return nil, fmt.Errorf("node namespace: %w", err)
		}
		lines = append(lines, "mount --bind "+shellQuote(f)+" "+shellQuote(src))
	}
	return lines, nil
}

// namespaceHolder returns containerd's process, whose mount namespace is
// the node's. One in the host's mount namespace (a stale or forged PID
// file, or a containerd restart still in nsenter) holds no node's
// namespace: what would be done in it, killing what shares it above all,
// would be done to the host. That is errHostNamespace.
func (n *Node) namespaceHolder() (process.Ref, error) {
	ref, err := n.runningComponent(Containerd)
	if err != nil {
		return process.Ref{}, fmt.Errorf("%w: the node's mount namespace is gone (run local-node up)", err)
	}
	host, err := inHostMountNamespace(ref.PID)
	if err != nil {
		return process.Ref{}, fmt.Errorf("the node's mount namespace: %w", err)
	}
	if host {
		return process.Ref{}, fmt.Errorf("%w: %s's process, pid %d, named by %s, is there (a stale or forged PID file, or containerd restarting); nothing is done in or to that namespace",
			errHostNamespace, Containerd, ref.PID, n.l.pidFile(Containerd))
	}
	return ref, nil
}

// unmountInNamespace removes the mounts below dir in the node's namespace,
// deepest first: a stopped kubelet leaves its own there.
func (n *Node) unmountInNamespace(dir string) error {
	holder, err := n.namespaceHolder()
	if err != nil {
		return err
	}
	mounts, err := mountsUnder(fmt.Sprintf("/proc/%d/mountinfo", holder.PID), dir)
	if err != nil {
		return fmt.Errorf("the node namespace's mounts: %w", err)
	}
	for _, m := range mounts {
		out, err := exec.Command("nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder.PID), "--", "umount", "--lazy", m).CombinedOutput()
		if err != nil {
			return fmt.Errorf("unmounting %s in the node's namespace: %v: %s", m, err, out)
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
