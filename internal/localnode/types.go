// Package localnode runs a single-node Kubernetes cluster on loopback: etcd,
// kube-apiserver, containerd with runc, and a kubelet, each a separate
// supervised process with its PID file and log under one state directory.
// containerd and the kubelet share the node's private mount namespace, so
// that what they mount and the host files they would change (sysctls,
// /var/log, shim sockets) stay inside the node; Down removes everything Up
// created.
package localnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// Ports are the loopback ports the node listens on. They avoid the stock
// kubelet's 10250/10248 and etcd's 2379/2380, so the node can run beside a
// real one.
type Ports struct {
	EtcdClient, EtcdPeer int
	APIServer            int
	Kubelet              int
	KubeletHealthz       int
}

// DefaultPorts are the ports used unless a Config says otherwise.
var DefaultPorts = Ports{EtcdClient: 12379, EtcdPeer: 12380, APIServer: 16443, Kubelet: 11250, KubeletHealthz: 11248}

// Config describes a local node.
type Config struct {
	// StateDir holds everything the node writes. It must be absolute, and
	// only root may change it or a directory or symlink on its path
	// (stateguard.Trust).
	StateDir string
	// BinDir holds etcd, kube-apiserver and pause.
	BinDir string
	// Kubelet is the kubelet binary to run.
	Kubelet string
	// KubeletFlags are extra kubelet flags, e.g. critlet's admission settings.
	KubeletFlags []string
	// KubeletEnv are NAME=value pairs added to the kubelet's environment,
	// e.g. critlet's CRITLET_PREEMPTION_* settings.
	KubeletEnv []string
	NodeName   string
	Ports      Ports
	// MaxPods is the kubelet's maxPods; 0 means the kubelet's default (110).
	MaxPods int32
	// RuntimeHandlers adds containerd runtime handlers (for RuntimeClasses):
	// handler name → the runc-compatible binary it runs.
	RuntimeHandlers map[string]string
	// RuntimeRequestTimeout bounds each CRI call of the kubelet; 0 means 2m,
	// the kubelet's default.
	RuntimeRequestTimeout time.Duration
	// RuntimeOnly starts containerd alone, in a network namespace of its own
	// as well as its mount namespace. Whatever joins the node (Node.Command)
	// brings its own control plane and kubelet, as upstream's node e2e
	// suite does; inside, loopback, the NodeIP address and the pods' bridge
	// are the node's own, so fixed ports, routes and net sysctls touch
	// nothing on the host.
	RuntimeOnly bool
	// HiddenCommands are host programs, by absolute path, that the node's
	// processes must not find: each is covered by an empty, non-executable
	// file in the node's mount namespace.
	HiddenCommands []string
	// PrivateDirs are host directories the node's processes see as the
	// node's own, empty at first: in the node's mount namespace each is a
	// directory under the state directory (PrivateDir), its mount point made
	// on the host, and recorded, when missing. kubeadm writes and reads
	// /etc/kubernetes and /var/lib/etcd so, with the host's untouched.
	PrivateDirs []string
	// SandboxImage is the image containerd starts pod sandboxes from; empty
	// means PauseImage, which the node imports itself. Another must be
	// imported (ImportImages) before the first pod.
	SandboxImage string
	// Log receives the node's progress; the zero value logs through klog.
	Log logr.Logger
}

// NodeIP is the node's address inside a RuntimeOnly node's network
// namespace, where it also carries the default route.
const NodeIP = "10.244.76.1"

// Component names, used for PID files, logs and messages.
const (
	Etcd       = "etcd"
	APIServer  = "kube-apiserver"
	Containerd = "containerd"
	Kubelet    = "kubelet"
)

// Images imported into containerd. Pods must use imagePullPolicy Never or
// IfNotPresent: there is no registry.
const (
	PauseImage   = "critlet.local/pause:1"
	BusyboxImage = "critlet.local/busybox:1"
)

// CgroupRoot is the kubelet's cgroupRoot: every pod cgroup lives under it, so
// teardown knows which cgroups are the node's.
const CgroupRoot = "/critlet"

// BridgeName is the CNI bridge the node's pods are attached to.
const BridgeName = "critlet0"

const podSubnet = "10.244.77.0/24"

// layout names the files under the state directory.
type layout struct{ root string }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.root}, elem...)...)
}
func (l layout) log(name string) string     { return l.path("logs", name+".log") }
func (l layout) pidFile(name string) string { return l.path("run", name+".pid") }
func (l layout) pki() string                { return l.path("pki") }
func (l layout) etcdData() string           { return l.path("etcd") }
func (l layout) containerd() string         { return l.path("containerd") }
func (l layout) criSocket() string          { return l.path("containerd", "containerd.sock") }
func (l layout) cniConfDir() string         { return l.path("cni", "net.d") }
func (l layout) cniIPAMDir() string         { return l.path("cni", "ipam") }
func (l layout) images() string             { return l.path("images") }
func (l layout) kubelet() string            { return l.path("kubelet") }
func (l layout) kubeletRoot() string        { return l.path("kubelet", "root") }

// mount is a directory bind-mounted over a host path in the node's mount
// namespace; it outlives kubelet restarts, since the mount refers to it.
func (l layout) mount(name string) string { return l.path("mounts", name) }

// privateDir is the node's directory that is host directory dir inside the
// node's mount namespace.
func (l layout) privateDir(dir string) string {
	return l.mount("private" + strings.ReplaceAll(dir, "/", "-"))
}

func (l layout) manifestDir() string      { return l.path("kubelet", "manifests") }
func (l layout) kubeletRootMount() string { return l.mount("var-lib-kubelet") }
func (l layout) devicePluginDir() string {
	return filepath.Join(l.kubeletRootMount(), "device-plugins")
}

// The node's code names its files by absolute path under the state
// directory; these open the directory (stateguard.Open), reach the entry
// from it, never through a link, and close it again.

// rel returns p relative to the state directory.
func (l layout) rel(p string) (string, error) {
	rel, err := filepath.Rel(l.root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is not in the state directory %s", p, l.root)
	}
	return rel, nil
}

// in runs fn on p's path relative to the state directory, opened.
func (l layout) in(p string, fn func(d *stateguard.Dir, rel string) error) error {
	rel, err := l.rel(p)
	if err != nil {
		return err
	}
	d, err := stateguard.Open(l.root)
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(d, rel)
}

// mkdirAll is os.MkdirAll below the state directory, through no link.
func (l layout) mkdirAll(p string, perm os.FileMode) error {
	return l.in(p, func(d *stateguard.Dir, rel string) error {
		if rel == "." {
			return nil
		}
		_, err := d.MkdirAll(rel, perm)
		return err
	})
}

// writeFile is os.WriteFile below the state directory, through no link.
func (l layout) writeFile(p string, data []byte, perm os.FileMode) error {
	return l.in(p, func(d *stateguard.Dir, rel string) error { return d.WriteFile(rel, data, perm) })
}

// ManifestDir is the kubelet's static pod directory.
func (c Config) ManifestDir() string { return layout{c.StateDir}.manifestDir() }

// PrivateDir is the host directory that is dir, one of PrivateDirs, inside
// the node's mount namespace.
func (c Config) PrivateDir(dir string) string { return layout{c.StateDir}.privateDir(dir) }

// KubeletRootMount is the host directory that is /var/lib/kubelet inside
// the node's namespace.
func (c Config) KubeletRootMount() string { return layout{c.StateDir}.kubeletRootMount() }

// DevicePluginDir is where the kubelet's device-plugin socket appears on the
// host (inside the kubelet's namespace it is /var/lib/kubelet/device-plugins).
func (c Config) DevicePluginDir() string { return layout{c.StateDir}.devicePluginDir() }

// CRIEndpoint is containerd's CRI endpoint, as a kubelet flag takes it.
func (c Config) CRIEndpoint() string { return "unix://" + layout{c.StateDir}.criSocket() }

// AdminKubeconfig is the path of the cluster-admin kubeconfig.
func (c Config) AdminKubeconfig() string {
	return filepath.Join(layout{c.StateDir}.pki(), "admin.kubeconfig")
}

// LogFile is the log of a component.
func (c Config) LogFile(component string) string { return layout{c.StateDir}.log(component) }

// logger is c.Log, or klog's logger when none is set.
func (c Config) logger() logr.Logger {
	if c.Log.GetSink() == nil {
		return klog.Background()
	}
	return c.Log
}

func (c Config) withDefaults() (Config, error) {
	if !filepath.IsAbs(c.StateDir) {
		return c, fmt.Errorf("state directory %q is not absolute", c.StateDir)
	}
	if c.NodeName == "" {
		c.NodeName = "critlet-node"
	}
	if err := checkPrivateDirs(c.PrivateDirs); err != nil {
		return c, err
	}
	if c.SandboxImage == "" {
		c.SandboxImage = PauseImage
	}
	if c.Ports == (Ports{}) {
		c.Ports = DefaultPorts
	}
	if c.RuntimeRequestTimeout == 0 {
		c.RuntimeRequestTimeout = 2 * time.Minute
	}
	c.Log = c.logger()
	return c, nil
}

// checkPrivateDirs refuses private directories that are no path the node
// may cover, or that overlap (one inside another, or the same directory
// under the state directory).
func checkPrivateDirs(dirs []string) error {
	seen := map[string]string{}
	for i, d := range dirs {
		if !stateguard.MayCoverOnHost(d) {
			return fmt.Errorf("private directory %q: want a clean absolute path that is no system directory", d)
		}
		for _, o := range dirs[:i] {
			if o == d || strings.HasPrefix(d, o+"/") || strings.HasPrefix(o, d+"/") {
				return fmt.Errorf("private directories %q and %q overlap", o, d)
			}
		}
		name := layout{}.privateDir(d)
		if o, ok := seen[name]; ok {
			return fmt.Errorf("private directories %q and %q would share the node's directory %s", o, d, name)
		}
		seen[name] = d
	}
	return nil
}
