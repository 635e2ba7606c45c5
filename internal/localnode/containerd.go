package localnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/oci"
	"github.com/critlet/critlet/internal/localnode/process"
)

// containerdConfig is containerd 1.6's configuration (format version 2).
// Everything it stores lives under the state directory; the CRI socket too.
const containerdConfig = `version = 2
root = "{{root}}"
state = "{{state}}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{{socket}}"

[ttrpc]
  address = "{{socket}}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{root}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  # The VM lacks CAP_SYS_RESOURCE: without this runc cannot give a sandbox
  # its oom_score_adj of -998 and every sandbox fails to start.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
{{handlers}}  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{cnibin}}"
    conf_dir = "{{cniconf}}"
`

// cniConfig attaches pods to a bridge without masquerading. On the host's
// network the bridge has no gateway either, so that the plugins touch
// neither routes nor ip_forward there: the node's pods need addresses, not
// routes off the host. In a RuntimeOnly node's own network the bridge is the
// gateway, so that the kubelet's probes and the suite reach the pods.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "critlet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{bridge}}",
      "isGateway": {{gateway}},
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{ipam}}",
        "ranges": [[{"subnet": "{{subnet}}"}]]
      }
    },
    {"type": "loopback"}
  ]
}
`

const cniBinDir = "/usr/lib/cni"

func expand(tmpl string, vars map[string]string) string {
	for k, v := range vars {
		tmpl = strings.ReplaceAll(tmpl, "{{"+k+"}}", v)
	}
	return tmpl
}

// writeContainerdConfig makes containerd's directories and writes its and
// the CNI configuration, none of it through a link; it returns
// containerd's configuration file.
func (n *Node) writeContainerdConfig() (string, error) {
	for _, d := range []string{n.l.containerd(), n.l.cniConfDir(), n.l.cniIPAMDir()} {
		if err := n.l.mkdirAll(d, 0o711); err != nil {
			return "", fmt.Errorf("containerd: %w", err)
		}
	}
	conf := filepath.Join(n.l.containerd(), "config.toml")
	if err := n.l.writeFile(conf, []byte(n.renderContainerdConfig()), 0o644); err != nil {
		return "", fmt.Errorf("containerd: writing config: %w", err)
	}
	if err := n.l.writeFile(filepath.Join(n.l.cniConfDir(), "10-critlet.conflist"), []byte(n.renderCNIConfig()), 0o644); err != nil {
		return "", fmt.Errorf("containerd: writing CNI config: %w", err)
	}
	return conf, nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	conf, err := n.writeContainerdConfig()
	if err != nil {
		return err
	}
	plan, err := planNamespace(n.cfg, n.l, theHost)
	if err != nil {
		return err
	}
	script, err := n.applyNamespace(plan)
	if err != nil {
		return err
	}
	script = append(script, `exec "$0" "$@"`)
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("containerd: %w (install it with hack/install-node-deps.sh)", err)
	}
	unshare := []string{"--mount", "--propagation", "private"}
	if n.cfg.RuntimeOnly {
		unshare = append(unshare, "--net")
	}
	h, err := n.start(process.Spec{
		Name: Containerd,
		Path: "unshare",
		Args: append(unshare, "--", "/bin/sh", "-c", strings.Join(script, "\n"), containerd, "--config", conf),
	})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, h, 60*time.Second, "serving CRI", n.criServing); err != nil {
		return err
	}
	return n.importImages(ctx)
}

// criServing asks containerd's CRI for its version.
func (n *Node) criServing(ctx context.Context) error {
	rt, closeFn, err := n.criClient(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	_, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// missingImages lists the node's images containerd does not hold.
func (n *Node) missingImages(ctx context.Context) ([]string, error) {
	conn, err := grpc.NewClient("unix://"+n.l.criSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", n.l.criSocket(), err)
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	var missing []string
	for _, name := range []string{PauseImage, BusyboxImage} {
		st, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		if st.GetImage() == nil {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// renderCNIConfig returns the pods' network configuration.
func (n *Node) renderCNIConfig() string {
	return expand(cniConfig, map[string]string{
		"bridge": BridgeName, "ipam": n.l.cniIPAMDir(), "subnet": podSubnet, "gateway": strconv.FormatBool(n.cfg.RuntimeOnly),
	})
}

// renderContainerdConfig returns containerd's configuration for the node,
// with a runc runtime per configured handler.
func (n *Node) renderContainerdConfig() string {
	dir := n.l.containerd()
	var handlers strings.Builder
	names := make([]string, 0, len(n.cfg.RuntimeHandlers))
	for name := range n.cfg.RuntimeHandlers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		const sect = `    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s.options]
        BinaryName = %[2]q
        SystemdCgroup = false
`
		fmt.Fprintf(&handlers, sect, name, n.cfg.RuntimeHandlers[name])
	}
	return expand(containerdConfig, map[string]string{
		"root": filepath.Join(dir, "root"), "state": filepath.Join(dir, "state"), "socket": n.l.criSocket(),
		"pause": n.cfg.SandboxImage, "cnibin": cniBinDir, "cniconf": n.l.cniConfDir(), "handlers": handlers.String(),
	})
}

// criClient dials containerd's CRI endpoint.
func (n *Node) criClient(ctx context.Context) (runtimeapi.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+n.l.criSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dialing %s: %w", n.l.criSocket(), err)
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

// importImages writes the pause and busybox images as OCI archives and
// imports them: the node has no registry.
func (n *Node) importImages(ctx context.Context) error {
	pause, err := os.ReadFile(filepath.Join(n.cfg.BinDir, "pause"))
	if err != nil {
		return fmt.Errorf("pause image: %w (build it with 'make local-up')", err)
	}
	busybox, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("busybox image: %w (install busybox-static with hack/install-node-deps.sh)", err)
	}
	bbFiles := []oci.File{{Path: "/bin/busybox", Mode: 0o755, Content: busybox}, {Path: "/pause", Mode: 0o755, Content: pause}}
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "ls", "true", "false", "kill", "ps", "env"} {
		bbFiles = append(bbFiles, oci.File{Path: "/bin/" + applet, Link: "busybox"})
	}
	return n.ImportImages(ctx,
		oci.Image{Name: PauseImage, Entrypoint: []string{"/pause"}, Files: []oci.File{{Path: "/pause", Mode: 0o755, Content: pause}}},
		oci.Image{Name: BusyboxImage, Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Files: bbFiles},
	)
}

// ImportImages writes each image as an OCI archive in the state directory
// and imports it into the node's containerd under its name.
func (n *Node) ImportImages(ctx context.Context, images ...oci.Image) error {
	// oci.WriteFile renames its archive into place: the directory must be
	// the node's own, not a link.
	if err := n.l.mkdirAll(n.l.images(), 0o755); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	for _, img := range images {
		// One archive per name; references hold characters paths should not.
		file := strings.NewReplacer("/", "_", ":", "_").Replace(img.Name) + ".tar"
		path := filepath.Join(n.l.images(), file)
		if err := oci.WriteFile(path, img); err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
		cmd := exec.CommandContext(ctx, "ctr", "--address", n.l.criSocket(), "--namespace", "k8s.io", "images", "import", path)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("importing image %s: %w\n%s", img.Name, err, out)
		}
	}
	return nil
}

const busyboxPath = "/bin/busybox"

// removeSandboxes stops and removes every pod sandbox in containerd,
// sandboxRemovalWorkers at a time: one by one, a node of 110 pods took
// minutes. Each stop kills the sandbox's containers itself; killing them
// from outside first would not help: containerd refuses to remove a
// container whose exit it has not yet handled.
func (n *Node) removeSandboxes(ctx context.Context) error {
	ref, ok, err := process.Read(Containerd, n.l.pidFile(Containerd))
	if err != nil || !ok || !ref.Alive() {
		return err
	}
	rt, closeFn, err := n.criClient(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	// Frozen containers cannot die; thaw them first.
	isolation.ThawCgroups(CgroupRoot)
	errs := make([]error, len(list.Items))
	var wg sync.WaitGroup
	slots := make(chan struct{}, sandboxRemovalWorkers)
	for i, sb := range list.Items {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
				errs[i] = fmt.Errorf("stopping sandbox %s (%s/%s): %w", sb.Id, sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err)
				return
			}
			if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
				errs[i] = fmt.Errorf("removing sandbox %s: %w", sb.Id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sandboxRemovalWorkers is how many sandboxes removeSandboxes stops at
// once: enough to overlap containerd's network teardowns, few enough not
// to queue past its request deadline on two cores.
const sandboxRemovalWorkers = 8
