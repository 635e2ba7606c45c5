package localnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command returns a command that runs inside the node's namespaces: its
// mount namespace and, for a RuntimeOnly node, its network. Processes
// started so are the node's: Down kills any that are left.
func (n *Node) Command(ctx context.Context, path string, args ...string) (*exec.Cmd, error) {
	holder, err := n.namespaceHolder()
	if err != nil {
		return nil, err
	}
	enter := []string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder.PID)}
	if n.cfg.RuntimeOnly {
		enter = append(enter, fmt.Sprintf("--net=/proc/%d/ns/net", holder.PID))
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(enter, "--", path), args...)...)
	// The command and whatever it starts form one process group, which a
	// cancelled context kills whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// namespaceID identifies a process's mount namespace.
func namespaceID(pid int) (string, error) {
	return os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
}

// joinedProcesses lists the processes in the node's mount namespace other
// than containerd and its shims: those that joined it, such as kubelets and
// commands, and their children. Containers are not among them: runc gives
// each a mount namespace of its own.
func (n *Node) joinedProcesses() ([]int, error) {
	holder, err := n.namespaceHolder()
	if err != nil {
		return nil, nil // no namespace, nobody in it
	}
	ns, err := namespaceID(holder.PID)
	if err != nil {
		return nil, fmt.Errorf("the node's mount namespace: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder.PID {
			continue
		}
		if id, err := namespaceID(pid); err != nil || id != ns {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(strings.SplitN(string(cmdline), "\x00", 2)[0], "containerd-shim") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// killJoined kills every process that joined the node's namespace and
// waits until they are gone.
func (n *Node) killJoined() error {
	return killUntilGone("in the node's namespace", n.joinedProcesses)
}
