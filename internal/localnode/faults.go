package localnode

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
)

// The faults a production node meets, on demand: a kubelet killed outright,
// an API server or a containerd restarted under a running kubelet, a
// container the runtime loses. Each leaves the rest of the node as it was.

// KillKubelet kills the kubelet with SIGKILL, as the OOM killer or a crash
// would: it gets no chance to finish what it was doing. Its pods and their
// containers keep running. StartKubelet starts it again on the same state.
func (n *Node) KillKubelet() error {
	kubelet, err := n.runningComponent(Kubelet)
	if err != nil {
		return err
	}
	if err := syscall.Kill(kubelet.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kubelet (pid %d): SIGKILL: %w", kubelet.PID, err)
	}
	// The supervisor records the exit and follows; then the PID file goes.
	return n.stopComponent(Kubelet, stopGrace)
}

// RestartAPIServer stops the API server and starts it again on the same
// etcd, waiting until it is ready: clients see their connections drop and
// requests fail meanwhile, as during a control-plane upgrade.
func (n *Node) RestartAPIServer(ctx context.Context) error {
	if n.cfg.RuntimeOnly {
		return errors.New("a RuntimeOnly node has no API server")
	}
	if err := n.stopComponent(APIServer, stopGrace); err != nil {
		return fmt.Errorf("restarting %s: %w", APIServer, err)
	}
	if err := n.startAPIServer(ctx); err != nil {
		return fmt.Errorf("restarting %s: %w", APIServer, err)
	}
	return nil
}

// RestartContainerd stops containerd and starts it again, as a runtime
// upgrade does. Its shims, and so the containers, keep running; the new
// containerd finds them again. The node's mount namespace outlives the old
// containerd through the kubelet, which must be running: the new containerd
// joins that namespace rather than making a fresh one, which would lose the
// shims' sockets and the kubelet's mounts.
func (n *Node) RestartContainerd(ctx context.Context) error {
	holder, err := n.kubeletProcess()
	if err != nil {
		return fmt.Errorf("restarting containerd: the node's namespace needs a holder: %w", err)
	}
	// Opened while the kubelet certainly holds them: containerd is entered
	// through these, whatever becomes of the kubelet's PID meanwhile.
	ns, err := isolation.OpenNamespaces(holder, n.cfg.RuntimeOnly)
	if errors.Is(err, isolation.ErrHostNamespace) {
		return fmt.Errorf("restarting containerd: kubelet (pid %d) has not joined the node's namespace", holder.PID)
	}
	if err != nil {
		return fmt.Errorf("restarting containerd: the node's namespaces: %w", err)
	}
	defer ns.Close()
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("restarting containerd: %w", err)
	}
	if err := n.stopComponent(Containerd, stopGrace); err != nil {
		return fmt.Errorf("restarting containerd: %w", err)
	}
	// containerd works in the namespace's root, where nsenter alone would
	// leave it.
	args, err := ns.EnterArgs("/")
	if err != nil {
		return fmt.Errorf("restarting containerd: %w", err)
	}
	h, err := n.start(process.Spec{
		Name:       Containerd,
		Path:       "nsenter",
		Args:       append(args, containerd, "--config", filepath.Join(n.l.containerd(), "config.toml")),
		ExtraFiles: ns.Files(),
	})
	if err != nil {
		return fmt.Errorf("restarting containerd: %w", err)
	}
	if err := waitFor(ctx, h, 60*time.Second, "serving CRI", n.criServing); err != nil {
		return fmt.Errorf("restarting containerd: %w", err)
	}
	return nil
}

// kubeletProcess returns the running kubelet itself (not its supervisor),
// once it is inside the node's namespace.
func (n *Node) kubeletProcess() (process.Ref, error) {
	k, err := n.runningComponent(Kubelet)
	if err != nil {
		return process.Ref{}, err
	}
	// nsenter execs the kubelet once it has joined: until then the process
	// is nsenter, in the host's namespace.
	host, err := isolation.InHostMountNamespace(k.PID)
	if err != nil {
		return process.Ref{}, err
	}
	if host {
		return process.Ref{}, fmt.Errorf("kubelet (pid %d) has not joined the node's namespace", k.PID)
	}
	return k, nil
}

// runningComponent returns the process a live supervisor of name runs.
func (n *Node) runningComponent(name string) (process.Ref, error) {
	ref, ok, err := process.Read(name, n.l.pidFile(name))
	switch {
	case err != nil:
		return process.Ref{}, err
	case !ok || !ref.Alive():
		return process.Ref{}, fmt.Errorf("%s is not running", name)
	}
	return ref.Component()
}

// RemoveContainer removes a container behind the kubelet's back, as a
// runtime that lost it would: containerd stops it at once (SIGKILL) and
// forgets it. id is the container's ID, with or without its
// "containerd://" prefix.
func (n *Node) RemoveContainer(ctx context.Context, id string) error {
	rt, closeFn, err := n.criClient(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	id = strings.TrimPrefix(id, "containerd://")
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	return nil
}

// PodContainers returns the IDs of the runtime's containers of pod uid,
// in any state: what the runtime itself has, whatever the API says.
func (n *Node) PodContainers(ctx context.Context, uid string) ([]string, error) {
	rt, closeFn, err := n.criClient(ctx)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	list, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing the containers of pod %s: %w", uid, err)
	}
	ids := make([]string, 0, len(list.Containers))
	for _, c := range list.Containers {
		ids = append(ids, c.Id)
	}
	return ids, nil
}

// RemovePodSandboxes leaves the runtime as a reboot leaves it, for a
// kubelet that is stopped: every pod sandbox and container gone, while the
// kubelet's directory (its checkpoints) and the pods in the API are kept.
func (n *Node) RemovePodSandboxes(ctx context.Context) error {
	if n.KubeletAlive() {
		return fmt.Errorf("removing pod sandboxes: stop the kubelet first")
	}
	if err := n.removeSandboxes(ctx); err != nil {
		return fmt.Errorf("removing pod sandboxes: %w", err)
	}
	return nil
}
