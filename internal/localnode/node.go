package localnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/pki"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/stateguard"
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

// Up starts the whole node and waits until it is Ready. A node already
// running under cfg.StateDir is left as it is if every component is alive;
// otherwise its remains are removed first.
func Up(ctx context.Context, cfg Config) (*Node, error) {
	return lockedUp(cfg.logger(), func() (*Node, error) { return up(ctx, cfg) })
}

// lockedUp runs a start-up under the host lock.
func lockedUp(log logr.Logger, start func() (*Node, error)) (*Node, error) {
	var n *Node
	err := hostFiles.WithLock(log, func() error {
		var err error
		n, err = start()
		return err
	})
	return n, err
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
			if err := n.waitRunning(ctx, Kubelet, time.Minute, "node Ready", func(ctx context.Context) error { return n.nodeReady(ctx, time.Time{}) }); err != nil {
				return nil, err
			}
			n.cfg.Log.Info("Local node already running, node Ready", "state", cfg.StateDir)
			return n, nil
		}
		// Another binary, a rebuilt one, or other flags: restart the kubelet
		// on the same node, as an upgrade would.
		n.cfg.Log.Info("Restarting the kubelet: the running one differs or has been rebuilt", "kubelet", n.cfg.Kubelet, "flags", n.cfg.KubeletFlags)
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
	return lockedUp(cfg.logger(), func() (*Node, error) { return upRuntime(ctx, cfg) })
}

func upRuntime(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := stateguard.RefuseCluster(cfg.StateDir); err != nil {
		return nil, err
	}
	if err := stateguard.Check(cfg.StateDir); err != nil {
		return nil, err
	}
	// Checked before anything is read from it, and used resolved: the node
	// works in the directory itself, whatever link led to it.
	real, err := stateguard.Trust(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, l: layout{real}}
	if os.Geteuid() != 0 {
		return nil, errors.New("the local node needs root: it runs containerd, mounts in a private namespace and manages cgroups (run as root, e.g. with sudo)")
	}
	if err := n.checkTools(); err != nil {
		return nil, err
	}
	// The cgroup root, the bridge and the host mount points have fixed
	// names: one node at a time owns them.
	if err := n.checkOwner(); err != nil {
		return nil, err
	}
	alive, stale, err := n.running()
	if err != nil {
		return nil, err
	}
	if len(stale) > 0 || (len(alive) > 0 && !n.allAlive(alive)) {
		// A crash or an interrupted Up: clear what is left, then start
		// afresh.
		n.cfg.Log.Info("Removing the remains of an earlier run", "state", cfg.StateDir, "running", listOrNone(alive), "dead", listOrNone(stale))
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
	// Claimed, and what it will hold recorded, before anything is made in it.
	if err := n.claim(); err != nil {
		return nil, err
	}
	for _, d := range []string{"logs", "run"} {
		if err := n.l.mkdirAll(n.l.path(d), 0o755); err != nil {
			return nil, fmt.Errorf("creating the state directory: %w", err)
		}
	}
	// pki writes its files by path (replacing, never writing through, a
	// link); its directory must be the node's own.
	if err := n.l.mkdirAll(n.l.pki(), 0o700); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
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
	if n.isAlive(Containerd) {
		// A node left running: every part is checked as a start checks it.
		if err := n.verifyRunning(ctx); err != nil {
			return nil, err
		}
		return n, nil
	}
	for _, c := range n.cfg.base() {
		if err := c.start(n, ctx); err != nil {
			return nil, err
		}
	}
	if n.cfg.RuntimeOnly {
		// The kubelets that join need their cgroup root.
		if err := isolation.CreateCgroupRoot(CgroupRoot); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// verifyRunning checks the components of a node found running, each as
// its start checks it, and imports the images if containerd lacks them.
func (n *Node) verifyRunning(ctx context.Context) error {
	for _, c := range n.cfg.base() {
		if err := n.waitRunning(ctx, c.name, 30*time.Second, c.healthyMeans, func(ctx context.Context) error { return c.healthy(n, ctx) }); err != nil {
			return err
		}
		if c.port != nil {
			ref, _, err := process.Read(c.name, n.l.pidFile(c.name))
			if err != nil {
				return err
			}
			if err := checkListener(c.name, c.port(n.cfg), ref.PID); err != nil {
				return err
			}
		}
	}
	missing, err := n.missingImages(ctx)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		n.cfg.Log.Info("Importing images containerd lacks", "images", missing)
		return n.importImages(ctx)
	}
	return nil
}

// waitRunning polls check on an already running component for up to
// timeout; failing, it says how to start afresh.
func (n *Node) waitRunning(ctx context.Context, name string, timeout time.Duration, what string, check func(context.Context) error) error {
	if last, _ := poll(ctx, timeout, nil, check); last != nil {
		return fmt.Errorf("%s runs under %s but is not %s: %v; start afresh with local-down, then local-up\n%s",
			name, n.cfg.StateDir, what, last, process.Tail(n.l.log(name), 25))
	}
	return nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// allAlive reports whether alive holds every component the node needs
// before its kubelet (which may be absent: UpRuntime).
func (n *Node) allAlive(alive []string) bool {
	for _, c := range n.cfg.base() {
		if !slices.Contains(alive, c.name) {
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
		ref, ok, err := process.Read(c.name, n.l.pidFile(c.name))
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		if ref.Alive() {
			alive = append(alive, c.name)
		} else {
			stale = append(stale, c.name)
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
	for _, comp := range components {
		c := comp.name
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
	// process.Start writes both by path, the log never through a link and
	// the PID file by renaming over its name: their directories must be
	// the node's own, not links.
	for _, f := range []string{spec.LogFile, spec.PIDFile} {
		if err := n.l.mkdirAll(filepath.Dir(f), 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Name, err)
		}
	}
	n.cfg.Log.Info("Starting component", "component", spec.Name, "log", spec.LogFile)
	return process.Start(spec)
}

// waitFor polls check until it succeeds, the process dies, or the timeout
// passes; errors carry the last lines of the component's log.
func waitFor(ctx context.Context, h *process.Handle, timeout time.Duration, what string, check func(context.Context) error) error {
	last, exited := poll(ctx, timeout, h.Done(), check)
	switch {
	case last == nil:
		return nil
	case exited:
		return fmt.Errorf("%s exited (%v) before it was %s\n%s", h.Name, h.Err(), what, process.Tail(h.LogFile, 25))
	}
	return fmt.Errorf("%s was not %s within %s: %v\n%s", h.Name, what, timeout, last, process.Tail(h.LogFile, 25))
}

// poll runs check every 200ms, each call bounded to 5s, until it succeeds
// (nil), exited closes or timeout passes; it returns check's last error
// and whether exited closed. A nil exited never closes.
func poll(ctx context.Context, timeout time.Duration, exited <-chan struct{}, check func(context.Context) error) (last error, died bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil, false
		}
		select {
		case <-exited:
			return last, true
		case <-ctx.Done():
			return last, false
		case <-t.C:
		}
	}
}
