//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// reset stops the kubelet (systemd's part: `kubeadm reset` finds no init
// system to stop it with, and must say so) and runs `kubeadm reset`; it
// then checks that nothing kubeadm or its node made is left: no file
// under the node's /etc/kubernetes, /var/lib/kubelet and /var/lib/etcd, no
// mount under /var/lib/kubelet, no container or sandbox in containerd.
func (kn *kubeadmNode) reset() string {
	kn.t.Helper()
	kn.svc.stop()
	out, err := kn.kubeadm(5*time.Minute, "reset", "--force", "--cri-socket", kn.node.Config().CRIEndpoint(), "-v=1")
	if err != nil {
		kn.t.Fatalf("%v\n%s", err, tail(out, 40))
	}
	// kubeadm stops the kubelet service only through an init system: the
	// host's, were one found.
	if !strings.Contains(out, resetNoInitSystem) {
		kn.t.Errorf("kubeadm reset found an init system (the host's, through which it stops the kubelet service): its output lacks %q", resetNoInitSystem)
	}
	cfg := kn.node.Config()
	var left, dirs []string
	for _, d := range []string{cfg.PrivateDir("/etc/kubernetes"), cfg.KubeletRootMount(), cfg.PrivateDir("/var/lib/etcd")} {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				left = append(left, fmt.Sprintf("%s: %v", p, err))
			case p == d:
			case e.IsDir():
				dirs = append(dirs, p)
			default:
				left = append(left, p)
			}
			return nil
		})
		if err != nil {
			kn.t.Fatal(err)
		}
	}
	if len(left) > 0 {
		kn.t.Errorf("kubeadm reset left %d files: %s", len(left), strings.Join(left, ", "))
	}
	mounts := kn.inNode("cat", "/proc/self/mountinfo")
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/var/lib/kubelet/") {
			kn.t.Errorf("kubeadm reset left a mount: %s", f[4])
		}
	}
	for _, what := range []string{"containers", "tasks"} {
		if got := strings.TrimSpace(kn.ctr(what, "ls", "-q")); got != "" {
			kn.t.Errorf("kubeadm reset left containerd %s: %s", what, strings.ReplaceAll(got, "\n", ", "))
		}
	}
	return fmt.Sprintf("kubeadm reset left no file, mount or container (empty directories kept: %d)", len(dirs))
}

// inNode runs a command inside the node and returns its output.
func (kn *kubeadmNode) inNode(name string, args ...string) string {
	kn.t.Helper()
	ctx, cancel := context.WithTimeout(kn.ctx, time.Minute)
	defer cancel()
	cmd, err := kn.node.Command(ctx, kn.work, name, args...)
	if err != nil {
		kn.t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		kn.t.Fatalf("%s %v in the node: %v", name, args, err)
	}
	return string(out)
}

// ctr runs containerd's client on the node's containerd, in the
// kubelet's namespace.
func (kn *kubeadmNode) ctr(args ...string) string {
	kn.t.Helper()
	sock := strings.TrimPrefix(kn.node.Config().CRIEndpoint(), "unix://")
	out, err := exec.CommandContext(kn.ctx, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).Output()
	if err != nil {
		kn.t.Fatalf("ctr %v: %v", args, err)
	}
	return string(out)
}
