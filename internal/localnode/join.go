package localnode

import (
	"context"
	"errors"
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
// mount namespace and, for a RuntimeOnly node, its network, in directory
// dir (absolute). Processes started so are the node's: Down kills any that
// are left.
func (n *Node) Command(ctx context.Context, dir, path string, args ...string) (*exec.Cmd, error) {
	if strings.Contains(path, "/") && !filepath.IsAbs(path) {
		return nil, fmt.Errorf("command %q in the node: a relative path would name a file of the command's directory there (%s)", path, dir)
	}
	holder, err := n.namespaceHolder()
	if err != nil {
		return nil, err
	}
	enter, err := n.enterArgs(holder.PID, dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(enter, path), args...)...)
	// The command and whatever it starts form one process group, which a
	// cancelled context kills whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// enterArgs are nsenter's arguments, up to the command, for a process that
// joins the namespaces of holder and works in dir. Joining a mount
// namespace moves a process to that namespace's root, where cwd-relative
// files would land on the host's /; nor may the directory be carried
// across (nsenter --wd): the process would be in a directory it cannot
// name (getcwd fails). So a shell changes into dir by name once inside,
// then execs the command, which keeps its PID.
func (n *Node) enterArgs(holder int, dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("working directory %q in the node: not an absolute path", dir)
	}
	args := []string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder)}
	if n.cfg.RuntimeOnly {
		args = append(args, fmt.Sprintf("--net=/proc/%d/ns/net", holder))
	}
	return append(args, "--", "/bin/sh", "-c", `cd -- "$1" || exit 126; shift; exec "$@"`, "critlet-enter", dir), nil
}

// errHostNamespace marks a process taken for the node's namespace holder
// that is in the host's mount namespace.
var errHostNamespace = errors.New("the node's namespace holder is in the host's mount namespace")

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

// mountNamespace identifies pid's mount namespace.
func mountNamespace(pid string) (nsID, error) {
	fi, err := os.Stat(filepath.Join("/proc", pid, "ns", "mnt"))
	if err != nil {
		return nsID{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// inHostMountNamespace reports whether pid shares the host's mount
// namespace: this process's, or init's.
func inHostMountNamespace(pid int) (bool, error) {
	ns, err := mountNamespace(strconv.Itoa(pid))
	if err != nil {
		return false, err
	}
	self, err := mountNamespace("self")
	if err != nil {
		return false, err
	}
	// init's may be out of reach (no CAP_SYS_PTRACE): this process's is
	// then the host's that counts.
	initNS, err := mountNamespace("1")
	return ns == self || err == nil && ns == initNS, nil
}

// joinedProcesses lists the processes in the node's mount namespace other
// than containerd and its shims: those that joined it, such as kubelets and
// commands, and their children. Containers are not among them: runc gives
// each a mount namespace of its own. A holder in the host's namespace
// lists nothing and is an error: every host process would be listed.
func (n *Node) joinedProcesses() ([]int, error) {
	holder, err := n.namespaceHolder()
	if errors.Is(err, errHostNamespace) {
		return nil, err
	}
	if err != nil {
		return nil, nil // no namespace, nobody in it
	}
	ns, err := mountNamespace(strconv.Itoa(holder.PID))
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
		if id, err := mountNamespace(e.Name()); err != nil || id != ns {
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
