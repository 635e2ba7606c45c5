package localnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/critlet/critlet/internal/localnode/pki"
	"github.com/critlet/critlet/internal/localnode/process"
)

// Node is a running local node.
type Node struct {
	cfg    Config
	l      layout
	pki    *pki.Set
	client kubernetes.Interface
}

// Client is a cluster-admin client of the node's API server.
func (n *Node) Client() kubernetes.Interface { return n.client }

// AdminKubeconfig is the path of the cluster-admin kubeconfig.
func (n *Node) AdminKubeconfig() string { return n.pki.AdminKubeconfig }

// Config is the node's configuration, defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// KubeletKubeconfig is the kubeconfig the node's kubelet uses.
func (n *Node) KubeletKubeconfig() string { return n.pki.KubeletKubeconfig }

// KubeletConfiguration is the KubeletConfiguration file StartKubelet
// writes for a kubelet of maxPods (0: the kubelet's default), for a
// kubelet started with a configuration file of its own.
func (n *Node) KubeletConfiguration(maxPods int32) ([]byte, error) {
	m := *n
	m.cfg.MaxPods = maxPods
	return m.kubeletConfig()
}

// SetKubelet changes the kubelet binary and flags used by the next
// StartKubelet.
func (n *Node) SetKubelet(path string, flags, env []string, maxPods int32) {
	n.cfg.Kubelet, n.cfg.KubeletFlags, n.cfg.KubeletEnv, n.cfg.MaxPods = path, flags, env, maxPods
}

// components in start order; Down stops them in reverse.
var components = []string{Etcd, APIServer, Containerd, Kubelet}

// Up starts the whole node and waits until it is Ready. A node already
// running under cfg.StateDir is left as it is if every component is alive;
// otherwise its remains are removed first.
func Up(ctx context.Context, cfg Config) (*Node, error) {
	return lockedUp(func() (*Node, error) { return up(ctx, cfg) })
}

func up(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.RuntimeOnly {
		return nil, errors.New("a RuntimeOnly node has no control plane for a kubelet of its own: start it with UpRuntime")
	}
	n, err := upRuntime(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if n.KubeletAlive() {
		running, _ := os.ReadFile(n.l.path("run", "kubelet.spec"))
		if string(running) == n.kubeletSpec() {
			fmt.Fprintf(os.Stderr, "local node: already running under %s\n", cfg.StateDir)
			return n, nil
		}
		// Another binary, a rebuilt one, or other flags: restart the kubelet
		// on the same node, as an upgrade would.
		fmt.Fprintf(os.Stderr, "local node: restarting the kubelet as %s %v (the running one differs or has been rebuilt)\n", n.cfg.Kubelet, n.cfg.KubeletFlags)
		if err := n.StopKubelet(); err != nil {
			return nil, err
		}
	}
	if err := n.StartKubelet(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// UpRuntime starts everything but the kubelet: etcd, kube-apiserver and
// containerd, or containerd alone for a RuntimeOnly node.
func UpRuntime(ctx context.Context, cfg Config) (*Node, error) {
	return lockedUp(func() (*Node, error) { return upRuntime(ctx, cfg) })
}

func upRuntime(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, l: layout{cfg.StateDir}}
	if err := checkStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the local node needs root: it runs containerd, mounts in a private namespace and manages cgroups (run as root, e.g. with sudo)")
	}
	if err := n.checkTools(); err != nil {
		return nil, err
	}
	// The cgroup root, the bridge and the host mount points have fixed
	// names: one node at a time owns them.
	if owner := hostOwner(); owner != "" && owner != cfg.StateDir {
		return nil, fmt.Errorf("the local node under %s owns this host's node resources (cgroup %s, bridge %s); stop it first: local-node down -state %s", owner, CgroupRoot, BridgeName, owner)
	}
	alive, stale, err := n.running()
	if err != nil {
		return nil, err
	}
	if len(stale) > 0 || (len(alive) > 0 && !n.allAlive(alive)) {
		// A crash or an interrupted Up: clear what is left, then start
		// afresh.
		fmt.Fprintf(os.Stderr, "local node: removing the remains of an earlier run in %s (running: %s; dead: %s)\n",
			cfg.StateDir, listOrNone(alive), listOrNone(stale))
		if err := down(cfg); err != nil {
			return nil, fmt.Errorf("clearing the earlier run: %w", err)
		}
		alive = nil
	}
	if len(alive) == 0 {
		if err := n.checkHostFree(); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"logs", "run"} {
		if err := os.MkdirAll(n.l.path(d), 0o755); err != nil {
			return nil, fmt.Errorf("creating the state directory: %w", err)
		}
	}
	if err := n.claim(); err != nil {
		return nil, err
	}
	apiURL := "https://127.0.0.1:" + strconv.Itoa(cfg.Ports.APIServer)
	n.pki, err = pki.Ensure(n.l.pki(), apiURL, cfg.NodeName, time.Now())
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", n.pki.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", n.pki.AdminKubeconfig, err)
	}
	restCfg.QPS, restCfg.Burst = 100, 200
	if n.client, err = kubernetes.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	starts := []func(context.Context) error{n.startEtcd, n.startAPIServer, n.startContainerd}
	if n.cfg.RuntimeOnly {
		starts = starts[2:]
	}
	if n.isAlive(Containerd) {
		return n, nil
	}
	for _, start := range starts {
		if err := start(ctx); err != nil {
			return nil, err
		}
	}
	if n.cfg.RuntimeOnly {
		// The kubelets that join need their cgroup root.
		if err := createCgroupRoot(CgroupRoot); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (n *Node) allAlive(alive []string) bool {
	// The kubelet may be absent (UpRuntime); the rest must all run.
	want := map[string]bool{Etcd: !n.cfg.RuntimeOnly, APIServer: !n.cfg.RuntimeOnly, Containerd: true}
	for _, a := range alive {
		delete(want, a)
	}
	for _, w := range want {
		if w {
			return false
		}
	}
	return true
}

func (n *Node) isAlive(name string) bool {
	ref, ok, err := process.Read(name, n.l.pidFile(name))
	return err == nil && ok && ref.Alive()
}

// stopComponent stops the component recorded in its PID file, if any, and
// removes the file.
func (n *Node) stopComponent(name string, grace time.Duration) error {
	ref, ok, err := process.Read(name, n.l.pidFile(name))
	if err != nil || !ok {
		return err
	}
	if err := ref.Stop(grace); err != nil {
		return err
	}
	if err := os.Remove(n.l.pidFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// running returns the components whose PID files name a live process, and
// those whose PID files name a dead one.
func (n *Node) running() (alive, stale []string, err error) {
	for _, c := range components {
		ref, ok, err := process.Read(c, n.l.pidFile(c))
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		if ref.Alive() {
			alive = append(alive, c)
		} else {
			stale = append(stale, c)
		}
	}
	return alive, stale, nil
}

// Status describes each component: running or not, and its log.
func Status(cfg Config) ([]string, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := layout{cfg.StateDir}
	var lines []string
	for _, c := range components {
		ref, ok, err := process.Read(c, l.pidFile(c))
		switch {
		case err != nil:
			return nil, err
		case !ok:
			lines = append(lines, fmt.Sprintf("%-15s not started", c))
		case ref.Alive():
			lines = append(lines, fmt.Sprintf("%-15s running (pid %d), log %s", c, ref.PID, l.log(c)))
		default:
			lines = append(lines, fmt.Sprintf("%-15s DEAD (pid %d gone), log %s\n%s", c, ref.PID, l.log(c), process.Tail(l.log(c), 10)))
		}
	}
	return lines, nil
}

// checkHostFree checks, before a node starts, that nothing holds its ports,
// bridge or cgroup root, so that these are reported as such rather than as
// a component dying.
func (n *Node) checkHostFree() error {
	// A RuntimeOnly node's ports and bridge are in its own network.
	if !n.cfg.RuntimeOnly {
		if err := n.cfg.Ports.checkFree(); err != nil {
			return err
		}
		if out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput(); err == nil {
			return fmt.Errorf("network device %s already exists, not made by this node: %s", BridgeName, strings.TrimSpace(string(out)))
		}
	}
	if procs := cgroupProcs(CgroupRoot); len(procs) > 0 {
		return fmt.Errorf("cgroup %s still holds processes %v, not started by this node", CgroupRoot, procs)
	}
	return nil
}

// ownerFile names, on the host, the state directory of the node that owns
// the fixed-name resources; it is on tmpfs, so a reboot, which removes
// those resources too, also removes it.
const ownerFile = "/run/critlet-local-node.owner"

// markerFile marks a state directory as a node's: Up claims no non-empty
// directory, and Down touches none, without it. It stays after Down, with
// the logs.
const markerFile = ".critlet-local-node"

func hostOwner() string {
	b, err := os.ReadFile(ownerFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// claim marks the state directory as a node's and the host's fixed-name
// resources as this node's.
func (n *Node) claim() error {
	if err := os.WriteFile(n.l.path(markerFile), []byte("critlet local node state directory (local-node up and down; down keeps the logs and this file)\n"), 0o644); err != nil {
		return fmt.Errorf("marking the state directory: %w", err)
	}
	if err := os.WriteFile(ownerFile, []byte(n.cfg.StateDir+"\n"), 0o644); err != nil {
		return fmt.Errorf("claiming the host's node resources: %w", err)
	}
	return nil
}

// checkTools reports every missing binary at once, with how to get it.
func (n *Node) checkTools() error {
	var missing []string
	files := []string{filepath.Join(n.cfg.BinDir, "pause")}
	if !n.cfg.RuntimeOnly {
		files = append(files, filepath.Join(n.cfg.BinDir, "etcd"), filepath.Join(n.cfg.BinDir, "kube-apiserver"), n.cfg.Kubelet)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f+" (run 'make local-up', which builds it)")
		}
	}
	for _, t := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "unshare", "nsenter", "mount", "umount", "ip"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t+" (hack/install-node-deps.sh installs it)")
		}
	}
	for _, f := range []string{busyboxPath, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f+" (hack/install-node-deps.sh installs it)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing:\n  %s", strings.Join(missing, "\n  "))
	}
	return nil
}

// checkFree reports the first port that something already listens on.
func (p Ports) checkFree() error {
	for _, port := range []struct {
		n    int
		what string
	}{{p.EtcdClient, "etcd"}, {p.EtcdPeer, "etcd peer"}, {p.APIServer, "kube-apiserver"}, {p.Kubelet, "kubelet"}, {p.KubeletHealthz, "kubelet healthz"}} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port.n))
		if err != nil {
			return fmt.Errorf("port %d (%s) on 127.0.0.1 is in use: another local node (see 'make local-down') or another program holds it: %w", port.n, port.what, err)
		}
		ln.Close()
	}
	return nil
}

// start starts a component recorded in the state directory.
func (n *Node) start(spec process.Spec) (*process.Handle, error) {
	spec.LogFile = n.l.log(spec.Name)
	spec.PIDFile = n.l.pidFile(spec.Name)
	fmt.Fprintf(os.Stderr, "local node: starting %s (log %s)\n", spec.Name, spec.LogFile)
	return process.Start(spec)
}

// waitFor polls check until it succeeds, the process dies, or the timeout
// passes; errors carry the last lines of the component's log.
func waitFor(ctx context.Context, h *process.Handle, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-h.Done():
			return fmt.Errorf("%s exited (%v) before it was %s\n%s", h.Name, h.Err(), what, process.Tail(h.LogFile, 25))
		case <-ctx.Done():
			return fmt.Errorf("%s was not %s within %s: %v\n%s", h.Name, what, timeout, last, process.Tail(h.LogFile, 25))
		case <-t.C:
		}
	}
}

// hostDir makes a mount point on the host and, if it did not exist,
// records it so that Down removes it again.
func (n *Node) hostDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	// Record the topmost directory that is created.
	top := dir
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		top = p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating mount point %s: %w", dir, err)
	}
	f, err := os.OpenFile(n.l.path("host-dirs"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("recording mount point %s: %w", dir, err)
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, top)
	return err
}

// createdHostDirs lists the host directories recorded by hostDir.
func (l layout) createdHostDirs() []string {
	f, err := os.Open(l.path("host-dirs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if d := strings.TrimSpace(sc.Text()); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
