package localnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// kubeletSysctls are the host sysctls the kubelet sets at start
// (setupKernelTunables). Inside its namespace each is a file bind-mounted
// over the /proc/sys entry, so the kubelet writes the file, not the kernel.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// kubeletConfig renders the node's KubeletConfiguration.
func (n *Node) kubeletConfig() ([]byte, error) {
	c := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:            "127.0.0.1",
		Port:               int32(n.cfg.Ports.Kubelet),
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To(int32(n.cfg.Ports.KubeletHealthz)),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: n.pki.CAFile},
		},
		// Only client certificates from the node's CA reach the kubelet, on
		// loopback.
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		ContainerRuntimeEndpoint: "unix://" + n.l.criSocket(),
		StaticPodPath:            n.l.manifestDir(),
		FileCheckFrequency:       metav1.Duration{Duration: 2 * time.Second},
		PodLogsDir:               n.l.path("kubelet", "pod-logs"),
		VolumePluginDir:          n.l.path("kubelet", "volume-plugins"),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               CgroupRoot,
		CgroupsPerQOS:            ptr.To(true),
		EnforceNodeAllocatable:   []string{"pods"},
		// This host has cgroup v1 hierarchies; v1beta1's default refuses them.
		FailCgroupV1: ptr.To(false),
		FailSwapOn:   ptr.To(false),
		MaxPods:      n.cfg.MaxPods,
		// Imported images cannot be pulled again: never collect them.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		// Eviction thresholds low enough that a busy build machine does not
		// evict the node's pods in the middle of a scenario.
		EvictionHard:          map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		RuntimeRequestTimeout: metav1.Duration{Duration: n.cfg.RuntimeRequestTimeout},
		ResolverConfig:        ptr.To(""),
		RegisterNode:          ptr.To(true),
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("kubelet: rendering configuration: %w", err)
	}
	return b, nil
}

// StartKubelet starts the configured kubelet and waits until its node is
// Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	if !filepath.IsAbs(n.cfg.Kubelet) {
		return fmt.Errorf("kubelet %q: not an absolute path (it is started in a directory of its own)", n.cfg.Kubelet)
	}
	if _, err := os.Stat(n.cfg.Kubelet); err != nil {
		return fmt.Errorf("kubelet: %w (build it with 'make kubelet' or 'make kubelet-stock')", err)
	}
	if err := isolation.CreateCgroupRoot(CgroupRoot); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	confPath, err := n.writeKubeletConfig()
	if err != nil {
		return err
	}

	// The kubelet joins the node's mount namespace, which containerd holds.
	ns, err := n.openNodeNamespaces()
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	defer ns.Close() // the supervisor has its own copies once started
	// The kubelet's log cleanup can glob relative paths: it works in an
	// empty directory of its own.
	args, err := ns.EnterArgs(n.l.path("kubelet", "work"))
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	args = append(args, n.cfg.Kubelet,
		"--config="+confPath,
		"--kubeconfig="+n.pki.KubeletKubeconfig,
		"--hostname-override="+n.cfg.NodeName,
		"--root-dir="+n.l.kubeletRoot(),
		"--cert-dir="+n.l.path("kubelet", "pki"),
		"--v=2",
	)
	args = append(args, n.cfg.KubeletFlags...)
	h, err := n.start(process.Spec{
		Name:       Kubelet,
		Path:       "nsenter",
		Args:       args,
		Env:        n.cfg.KubeletEnv,
		ExtraFiles: ns.Files(),
	})
	if err != nil {
		return err
	}
	if err := n.l.writeFile(n.l.path("run", "kubelet.spec"), []byte(n.kubeletSpec()), 0o644); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	// The Node may still say Ready from an earlier kubelet; only a heartbeat
	// after this start counts (heartbeats have one-second resolution).
	started := time.Now().Add(-time.Second)
	if err := waitFor(ctx, h, 3*time.Minute, "node Ready", func(ctx context.Context) error { return n.nodeReady(ctx, started) }); err != nil {
		return err
	}
	return checkListener(Kubelet, n.cfg.Ports.KubeletHealthz, h.PID)
}

// writeKubeletConfig makes the kubelet's directories and writes its
// configuration, none of it through a link; it returns the file's path.
func (n *Node) writeKubeletConfig() (string, error) {
	for _, d := range []string{n.l.kubeletRoot(), n.l.manifestDir(), n.l.path("kubelet", "pod-logs"),
		n.l.path("kubelet", "volume-plugins"), n.l.path("kubelet", "work")} {
		if err := n.l.mkdirAll(d, 0o750); err != nil {
			return "", fmt.Errorf("kubelet: %w", err)
		}
	}
	conf, err := n.kubeletConfig()
	if err != nil {
		return "", err
	}
	confPath := n.l.path("kubelet", "config.yaml")
	if err := n.l.writeFile(confPath, conf, 0o644); err != nil {
		return "", fmt.Errorf("kubelet: writing configuration: %w", err)
	}
	return confPath, nil
}

// nodeReady asks the kubelet's healthz, then the API for the node's Ready
// condition, with a heartbeat no older than since.
func (n *Node) nodeReady(ctx context.Context, since time.Time) error {
	if err := httpOK(ctx, "http://127.0.0.1:"+strconv.Itoa(n.cfg.Ports.KubeletHealthz)+"/healthz"); err != nil {
		return err
	}
	node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since) {
				return nil
			}
			return fmt.Errorf("node %s is not Ready: %s", n.cfg.NodeName, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", n.cfg.NodeName)
}

// kubeletSpec identifies the kubelet binary (by path, size and time, so a
// rebuilt binary differs) and its flags.
func (n *Node) kubeletSpec() string {
	var size, mtime int64
	if st, err := os.Stat(n.cfg.Kubelet); err == nil {
		size, mtime = st.Size(), st.ModTime().UnixNano()
	}
	return fmt.Sprintf("%s size=%d mtime=%d max-pods=%d flags=%q env=%q\n", n.cfg.Kubelet, size, mtime, n.cfg.MaxPods, n.cfg.KubeletFlags, n.cfg.KubeletEnv)
}

// StopKubelet stops the kubelet, leaving its pods to the runtime, as a
// kubelet restart does.
func (n *Node) StopKubelet() error { return n.stopComponent(Kubelet, stopGrace) }

// KubeletAlive reports whether the kubelet process still runs.
func (n *Node) KubeletAlive() bool { return n.isAlive(Kubelet) }

// ResetKubelet stops the kubelet and removes everything it ran or stored:
// the node's pods in the API, their sandboxes and processes, pod cgroups,
// the Node object, the kubelet's mounts and directory. The next
// StartKubelet registers a fresh node. On a RuntimeOnly node it stops what
// joined the node instead, and there is no API to clean. It goes on after a
// failed step and reports them all.
func (n *Node) ResetKubelet(ctx context.Context) error {
	if err := n.StopKubelet(); err != nil {
		return err
	}
	var errs []error
	if n.cfg.RuntimeOnly {
		errs = append(errs, n.killJoined())
	} else {
		errs = append(errs, n.deleteAPIPods(ctx))
	}
	errs = append(errs, n.removeSandboxes(ctx))
	// What the runtime could not stop is killed.
	errs = append(errs, isolation.KillCgroupProcs(CgroupRoot), isolation.RemoveCgroups(CgroupRoot))
	if n.cfg.RuntimeOnly {
		// The next kubelet to join needs its cgroup root.
		errs = append(errs, isolation.CreateCgroupRoot(CgroupRoot))
	} else {
		if err := n.client.CoreV1().Nodes().Delete(ctx, n.cfg.NodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", n.cfg.NodeName, err))
		}
	}
	errs = append(errs, n.unmountInNamespace(n.l.kubelet()), n.unmountInNamespace("/var/lib/kubelet"))
	errs = append(errs, n.removeKubeletState())
	if err := n.l.mkdirAll(n.l.devicePluginDir(), 0o755); err != nil {
		errs = append(errs, fmt.Errorf("kubelet: %w", err))
	}
	return errors.Join(errs...)
}

// removeKubeletState removes the kubelet's directory and empties the
// node's /var/log and /var/lib/kubelet (kept: the namespace's mounts refer
// to them), with Down's guard: what holds a host mount stays.
func (n *Node) removeKubeletState() error {
	r, err := stateguard.Open(n.l.root)
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	defer r.Close()
	var errs []error
	for _, d := range []struct {
		dir    string
		remove func(string) error
	}{{n.l.kubelet(), r.RemoveAll}, {n.l.mount("var-log"), r.ClearDir}, {n.l.kubeletRootMount(), r.ClearDir}} {
		rel, err := n.l.rel(d.dir)
		if err == nil {
			err = withoutHostMounts(r, rel, d.remove)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteAPIPods force-deletes every pod bound to the node: with the kubelet
// stopped nobody would confirm a graceful deletion.
func (n *Node) deleteAPIPods(ctx context.Context) error {
	pods, err := n.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.cfg.NodeName})
	if err != nil {
		return fmt.Errorf("listing the node's pods: %w", err)
	}
	for _, p := range pods.Items {
		err := n.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}
