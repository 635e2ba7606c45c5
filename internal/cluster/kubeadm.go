package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/critlet/critlet/internal/kubeadmimages"
	"github.com/critlet/critlet/internal/localnode/oci"
)

// criSocket is containerd's socket on every machine (Debian's default).
const criSocket = "unix:///run/containerd/containerd.sock"

// kubeletConfig is what every kubelet of the cluster runs with (kubeadm
// puts it in the kubelet-config ConfigMap, which joining nodes read): the
// cgroupfs driver, as containerd's runc; cgroup v1 allowed, since this
// kind of host mounts it.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
`

// ignoredPreflight: on this host's cgroup v1 kubeadm asks for its
// SystemVerification check to be skipped; nothing else is ignored.
const ignoredPreflight = "SystemVerification"

// nodeRegistration is the same for init and join: the machine's name and
// address, containerd, the images imported (nothing to pull).
const nodeRegistration = `nodeRegistration:
  name: {{.Name}}
  criSocket: {{.CRI}}
  imagePullPolicy: Never
  ignorePreflightErrors: [{{.Ignore}}]
  kubeletExtraArgs:
  - name: node-ip
    value: {{.Addr}}
`

const initConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: {{.Addr}}
  bindPort: 6443
` + nodeRegistration + `---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {{.Version}}
imageRepository: {{.Repo}}
dns:
  disabled: true
proxy:
  disabled: true
---
` + kubeletConfig

const joinConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: {{.Server}}:6443
    token: {{.Token}}
    caCertHashes: [{{.Hash}}]
` + nodeRegistration

func render(text string, data map[string]string) ([]byte, error) {
	var b bytes.Buffer
	if err := template.Must(template.New("").Parse(text)).Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ImportImages writes images into machine name and imports them into its
// containerd's k8s.io namespace, where the kubelet finds them.
func (c *Cluster) ImportImages(ctx context.Context, name string, images []oci.Image) error {
	const dir = "/var/cache/critlet-cluster/images"
	host := filepath.Join(c.RootDir(name), dir)
	if err := os.MkdirAll(host, 0o755); err != nil {
		return err
	}
	for _, img := range images {
		file := strings.NewReplacer("/", "_", ":", "_").Replace(img.Name) + ".tar"
		if err := oci.WriteFile(filepath.Join(host, file), img); err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
		if _, err := c.Exec(ctx, name, "ctr", "--namespace", "k8s.io", "images", "import", dir+"/"+file); err != nil {
			return err
		}
	}
	return nil
}

// Init runs `kubeadm init` on machine name for Kubernetes version.
func (c *Cluster) Init(ctx context.Context, name, version string) (string, error) {
	m, err := c.machine(name)
	if err != nil {
		return "", err
	}
	conf, err := render(initConfig, map[string]string{"Addr": m.Addr, "Name": m.Name, "CRI": criSocket,
		"Ignore": ignoredPreflight, "Version": version, "Repo": kubeadmimages.Repository})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.RootDir(name), "root/kubeadm.yaml"), conf, 0o600); err != nil {
		return "", err
	}
	return c.Exec(ctx, name, "kubeadm", "init", "--config", "/root/kubeadm.yaml")
}

// Join runs `kubeadm join` on machine name against the control plane on
// machine server, with a bootstrap token made there for it.
func (c *Cluster) Join(ctx context.Context, server, name string) (string, error) {
	m, err := c.machine(name)
	if err != nil {
		return "", err
	}
	s, err := c.machine(server)
	if err != nil {
		return "", err
	}
	out, err := c.Exec(ctx, server, "kubeadm", "token", "create", "--ttl", "1h", "--print-join-command")
	if err != nil {
		return "", err
	}
	// kubeadm join <server> --token T --discovery-token-ca-cert-hash H
	f := strings.Fields(out)
	var token, hash string
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "--token":
			token = f[i+1]
		case "--discovery-token-ca-cert-hash":
			hash = f[i+1]
		}
	}
	if token == "" || hash == "" {
		return "", fmt.Errorf("kubeadm token create printed no join command: %q", out)
	}
	conf, err := render(joinConfig, map[string]string{"Server": s.Addr, "Token": token, "Hash": hash,
		"Name": m.Name, "Addr": m.Addr, "CRI": criSocket, "Ignore": ignoredPreflight})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.RootDir(name), "root/kubeadm-join.yaml"), conf, 0o600); err != nil {
		return "", err
	}
	return c.Exec(ctx, name, "kubeadm", "join", "--config", "/root/kubeadm-join.yaml")
}

// Kubectl runs kubectl as the cluster's administrator on machine name
// (a control-plane machine).
func (c *Cluster) Kubectl(ctx context.Context, name string, args ...string) (string, error) {
	return c.Exec(ctx, name, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// KubectlInput is Kubectl with standard input (a manifest for -f -).
func (c *Cluster) KubectlInput(ctx context.Context, name string, stdin []byte, args ...string) (string, error) {
	return c.ExecInput(ctx, name, stdin, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// WaitReady waits until node is Ready, as the control plane on server
// sees it.
func (c *Cluster) WaitReady(ctx context.Context, server, node string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		out, err := c.Kubectl(ctx, server, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		last = strings.TrimSpace(out)
		if err == nil && last == "True" {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("node %s not Ready after %s (last: %q)", node, timeout, last)
}
