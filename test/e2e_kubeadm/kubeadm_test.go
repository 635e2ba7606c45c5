//go:build e2ekubeadm

package e2ekubeadm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/critlet/critlet/internal/kubeadmimages"
	"github.com/critlet/critlet/internal/localnode"
	"github.com/critlet/critlet/internal/localnode/oci"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// cgroupV2 is whether this machine mounts the unified hierarchy.
var cgroupV2 = func() bool {
	var st syscall.Statfs_t
	return syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == 0x63677270 // CGROUP2_SUPER_MAGIC
}()

// nodeName is the node kubeadm registers.
const nodeName = "critlet-kubeadm"

// privateDirs are the host directories kubeadm and its node write: the
// node's own inside its mount namespace (beside /var/lib/kubelet and
// /var/log, which every local node covers). /usr/libexec/kubernetes holds
// the kubelet's and the controller manager's FlexVolume directory, which
// both create. /run/systemd and /run/dbus, where systemd and the system
// bus listen, are the node's too, and empty: a systemctl that kubeadm
// found after all (its detection is systemctl on PATH) would reach no
// systemd, rather than restart (init) or stop (reset) the host's kubelet.
var privateDirs = []string{"/etc/kubernetes", "/var/lib/etcd", "/usr/libexec/kubernetes", "/run/systemd", "/run/dbus"}

// initSystemCommands are the programs whose presence on PATH makes kubeadm
// take the machine for a systemd or an OpenRC one and manage the kubelet's
// service through them (cmd/kubeadm/app/util/initsystem): hidden from the
// node in every directory of kubeadm's PATH.
var initSystemCommands = []string{"systemctl", "openrc"}

// kubeadm's output lines when it finds no init system, each asserted: in
// init's kubelet-start phase (cmd/kubeadm/app/phases/kubelet), and
// reset's, which then leaves the kubelet to be stopped by hand
// (cmd/kubeadm/app/cmd/phases/reset).
const (
	initNoInitSystem  = "[kubelet-start] No supported init system detected, won't make sure the kubelet is running properly."
	resetNoInitSystem = "[reset] The kubelet service could not be stopped by kubeadm. Unable to detect a supported init system!"
)

// ignoredPreflight are kubeadm's preflight errors this machine cannot
// satisfy, each with why. Everything else kubeadm checks must pass.
var ignoredPreflight = map[string]string{
	// Checked below: once ignored, kubeadm prints the check's findings as
	// warnings, and the only one allowed is cgroup v1's.
	"SystemVerification": "this machine's kernel mounts cgroup v1, and kubeadm, for a kubelet that may run there (failCgroupV1: false), asks for this check to be skipped",
}

// cgroupV1Finding is SystemVerification's finding on a cgroup v1 machine.
const cgroupV1Finding = "cgroups v1 support is deprecated"

// kubeadmConfig is what `kubeadm init` is given: the node's address and
// containerd, the images built here, no add-ons whose images are not built
// here (CoreDNS, kube-proxy), and a kubelet on cgroupfs (systemd is not
// PID 1 here) under the node's cgroup root, so that the node's teardown
// knows its cgroups. The kubelet's resolver configuration, which it needs
// for every pod sandbox, is a copy of the host's (upNode): /etc/resolv.conf
// may lead into /run/systemd (systemd-resolved's), which is the node's own.
const kubeadmConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: {{.IP}}
  bindPort: 6443
nodeRegistration:
  name: {{.Node}}
  criSocket: {{.CRI}}
  imagePullPolicy: Never
  kubeletExtraArgs:
  - name: node-ip
    value: {{.IP}}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {{.Version}}
imageRepository: {{.Repo}}
dns:
  disabled: true
proxy:
  disabled: true
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
failCgroupV1: {{.FailCgroupV1}}
resolvConf: {{printf "%q" .ResolvConf}}
`

// kubeadmNode is a local node that kubeadm bootstraps, with one installed
// kubelet run as its unit would run it.
type kubeadmNode struct {
	t      *testing.T
	ctx    context.Context
	dir    string // this node's logs and files
	node   *localnode.Node
	k      installed
	svc    *service
	client kubernetes.Interface
	cfg    localnode.Config
	work   string // the working directory of what the suite runs in the node: empty, the suite's
	config string // kubeadm's configuration file
	proxy  *apiProxy

	downOnce sync.Once
}

// nodeConfig is the local node kubeadm bootstraps with kubelet k, its
// state in stateDir.
func nodeConfig(stateDir string, k installed) localnode.Config {
	var hidden []string
	for _, dir := range filepath.SplitList(k.kubeadmPath()) {
		for _, c := range initSystemCommands {
			hidden = append(hidden, filepath.Join(dir, c))
		}
	}
	return localnode.Config{
		StateDir:     filepath.Join(stateDir, "node"),
		BinDir:       *binDir,
		NodeName:     nodeName,
		RuntimeOnly:  true,
		PrivateDirs:  privateDirs,
		SandboxImage: kubeadmimages.PauseRef,
		// kubeadm must find no init system: it would restart and stop the
		// host's kubelet service through it.
		HiddenCommands: hidden,
	}
}

// kubeadmPath is the PATH kubeadm runs with: the installed kubelet's
// directory first, as its package puts it on PATH (kubeadm's preflight
// asks the kubelet for its version), then systemd's.
func (k installed) kubeadmPath() string {
	return filepath.Join(k.root, "usr/bin") + ":" + strings.TrimPrefix(systemdPath, "PATH=")
}

// upNode starts a RuntimeOnly local node for kubeadm, with the control
// plane's images imported, and the kubelet's unit supervised (it fails
// until kubeadm writes its configuration, as on a fresh node). Its files
// are in state, the suite's checked state directory.
func upNode(t *testing.T, ctx context.Context, state *stateguard.Dir, k installed, version string) *kubeadmNode {
	t.Helper()
	dir, err := state.Fresh(k.name, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(state.Path(), k)
	// Registered first: a node that failed half-way up is removed too.
	kn := &kubeadmNode{t: t, ctx: ctx, dir: dir, k: k, cfg: cfg, work: filepath.Join(dir, "work")}
	t.Cleanup(kn.down)
	if err := os.Mkdir(kn.work, 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := localnode.UpRuntime(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the node: %v", err)
	}
	kn.node = n
	images, err := kubeadmimages.ControlPlane(*binDir, version)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.ImportImages(ctx, images...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d control-plane images built and imported in %s", len(images), time.Since(start).Round(time.Millisecond))
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatalf("the host's resolver configuration, the kubelet's for pods: %v", err)
	}
	resolvConf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolvConf, resolv, 0o644); err != nil {
		t.Fatal(err)
	}
	kn.config = filepath.Join(dir, "kubeadm.yaml")
	conf, err := renderKubeadmConfig(n.Config().CRIEndpoint(), version, resolvConf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kn.config, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	kn.checkImageList(images)
	// kubeadm's installation prerequisite, done inside the node: the node
	// covers the key with a file of its own (localnode's sysctl masks), which
	// takes the write and which kubeadm's preflight reads; the host's
	// setting is not reached.
	kn.inNode("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	if err := k.linkNode(n.Config()); err != nil {
		t.Fatal(err)
	}
	kn.svc, err = startService(n, k, filepath.Join(dir, "kubelet.log"), kn.work)
	if err != nil {
		t.Fatal(err)
	}
	return kn
}

// renderKubeadmConfig is kubeadmConfig for the node's containerd, the
// binaries' version and the kubelet's resolver configuration.
func renderKubeadmConfig(cri, version, resolvConf string) ([]byte, error) {
	var b bytes.Buffer
	if err := template.Must(template.New("").Parse(kubeadmConfig)).Execute(&b, map[string]string{
		"IP": localnode.NodeIP, "Node": nodeName, "CRI": cri, "Version": version,
		"Repo": kubeadmimages.Repository, "CgroupRoot": localnode.CgroupRoot, "FailCgroupV1": strconv.FormatBool(cgroupV2),
		"ResolvConf": resolvConf,
	}); err != nil {
		return nil, fmt.Errorf("kubeadm's configuration: %w", err)
	}
	return b.Bytes(), nil
}

// down stops the kubelet and removes the node; once, however often called.
func (kn *kubeadmNode) down() {
	kn.downOnce.Do(func() {
		if kn.svc != nil {
			kn.svc.stop()
		}
		if kn.proxy != nil {
			kn.proxy.stop()
		}
		if err := localnode.Down(kn.cfg); err != nil && !errors.Is(err, localnode.ErrNotANode) {
			kn.t.Errorf("removing the node: %v", err)
		}
	})
}

// kubeadm runs kubeadm inside the node, its output in the node's log
// directory, and returns the output.
func (kn *kubeadmNode) kubeadm(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(kn.ctx, timeout)
	defer cancel()
	cmd, err := kn.node.Command(ctx, kn.work, filepath.Join(*binDir, "kubeadm"), args...)
	if err != nil {
		return "", err
	}
	cmd.Env = []string{"PATH=" + kn.k.kubeadmPath()}
	out, err := cmd.CombinedOutput()
	log := filepath.Join(kn.dir, "kubeadm-"+args[0]+".log")
	if werr := os.WriteFile(log, out, 0o644); werr != nil {
		kn.t.Errorf("writing %s: %v", log, werr)
	}
	if err != nil {
		return string(out), fmt.Errorf("kubeadm %s: %w (output in %s)", strings.Join(args, " "), err, log)
	}
	return string(out), nil
}

// checkImageList asks kubeadm which images its configuration needs: exactly
// those imported.
func (kn *kubeadmNode) checkImageList(imported []oci.Image) {
	kn.t.Helper()
	out, err := kn.kubeadm(time.Minute, "config", "images", "list", "--config", kn.config)
	if err != nil {
		kn.t.Fatalf("%v\n%s", err, out)
	}
	var listed, want []string
	for _, l := range strings.Fields(out) {
		listed = append(listed, l)
	}
	for _, img := range imported {
		want = append(want, img.Name)
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		kn.t.Fatalf("kubeadm config images list names %v, want exactly the images imported %v", listed, want)
	}
}

// init runs `kubeadm init`, and returns when kubeadm reported success and
// the node is Ready; it returns the time from the start of init to Ready.
func (kn *kubeadmNode) init() time.Duration {
	kn.t.Helper()
	var ignore []string
	for name := range ignoredPreflight {
		if name == "SystemVerification" && cgroupV2 {
			continue // nothing for it to find here
		}
		ignore = append(ignore, name)
	}
	slices.Sort(ignore)
	args := []string{"init", "--config", kn.config, "-v=1"}
	if len(ignore) > 0 {
		args = append(args, "--ignore-preflight-errors="+strings.Join(ignore, ","))
	}
	start := time.Now()
	out, err := kn.kubeadm(10*time.Minute, args...)
	if err != nil {
		kn.t.Fatalf("%v\n%s", err, tail(out, 60))
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "[WARNING SystemVerification]") && !strings.Contains(l, cgroupV1Finding) {
			kn.t.Errorf("kubeadm's system verification found more than cgroup v1: %s", l)
		}
	}
	if !strings.Contains(out, "Your Kubernetes control-plane has initialized successfully!") {
		kn.t.Fatalf("kubeadm init exited 0 without its success message:\n%s", tail(out, 40))
	}
	// Found an init system, kubeadm has already restarted a kubelet service
	// through it: stop before reset would stop one too.
	if !strings.Contains(out, initNoInitSystem) {
		kn.t.Fatalf("kubeadm init found an init system (the host's, through which it restarts the kubelet service): its output lacks %q", initNoInitSystem)
	}
	// A short path: a unix socket's is limited to 107 bytes.
	sock := filepath.Join(kn.t.TempDir(), "api.sock")
	if kn.proxy, err = startProxy(kn.ctx, kn.node, sock, localnode.NodeIP+":6443", kn.work, filepath.Join(kn.dir, "proxy.log")); err != nil {
		kn.t.Fatal(err)
	}
	kn.client, err = clientVia(filepath.Join(kn.node.Config().PrivateDir("/etc/kubernetes"), "admin.conf"), sock)
	if err != nil {
		kn.t.Fatal(err)
	}
	kn.waitReady(5 * time.Minute)
	return time.Since(start)
}

// waitReady waits until the node is Ready.
func (kn *kubeadmNode) waitReady(timeout time.Duration) {
	kn.t.Helper()
	last := "no Ready condition"
	if err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := kn.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		kn.t.Fatalf("node %s not Ready within %s: %s", nodeName, timeout, last)
	}
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
