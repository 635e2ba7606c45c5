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

	"github.com/critlet/critlet/internal/localnode/process"
)

// Command returns a command that runs inside the node's namespaces: its
// mount namespace and, for a RuntimeOnly node, its network, in directory
// dir (absolute). Processes started so are the node's: Down kills any that
// are left. The namespaces are opened here, from their holder, and handed
// to nsenter as cmd.ExtraFiles (descriptors 3 and 4): a caller adding
// files appends to them. The command itself does not inherit them.
func (n *Node) Command(ctx context.Context, dir, path string, args ...string) (*exec.Cmd, error) {
	if strings.Contains(path, "/") && !filepath.IsAbs(path) {
		return nil, fmt.Errorf("command %q in the node: a relative path would name a file of the command's directory there (%s)", path, dir)
	}
	ns, err := n.openNodeNamespaces()
	if err != nil {
		return nil, err
	}
	enter, err := ns.enterArgs(dir)
	if err != nil {
		ns.close()
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(enter, path), args...)...)
	// Once started, the command holds its own copies; this process's are
	// closed when cmd is collected (or by a caller, once it has started).
	cmd.ExtraFiles = ns.files()
	ns.closeProc()
	// The command and whatever it starts form one process group, which a
	// cancelled context kills whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// nodeNamespaces are the node's namespaces, opened once from the process
// holding them, through its /proc directory checked to be that process
// (process.Ref.OpenProc), and checked to be none of the host's. Entering
// goes through these descriptors, never /proc/PID again: between a check
// by PID and nsenter opening /proc/PID/ns/* the holder may die and its
// PID go to a host process, whose namespaces, the host's, would be
// entered.
type nodeNamespaces struct {
	holder process.Ref
	proc   *os.File // the holder's /proc directory
	mnt    *os.File
	net    *os.File // a RuntimeOnly node's; nil otherwise
	mntID  nsID
}

// openNamespaces opens holder's mount namespace and, with net, its network
// namespace. A holder in the host's mount namespace is errHostNamespace.
func openNamespaces(holder process.Ref, net bool) (*nodeNamespaces, error) {
	proc, err := holder.OpenProc()
	if err != nil {
		return nil, err
	}
	ns := &nodeNamespaces{holder: holder, proc: proc}
	if ns.mnt, err = openAt(proc, "ns/mnt"); err != nil {
		ns.close()
		return nil, fmt.Errorf("%s (pid %d): %w", holder.Name, holder.PID, err)
	}
	if ns.mntID, err = fileNamespace(ns.mnt); err != nil {
		ns.close()
		return nil, err
	}
	host, err := isHostMountNamespace(ns.mntID)
	if err != nil {
		ns.close()
		return nil, fmt.Errorf("the node's mount namespace: %w", err)
	}
	if host {
		ns.close()
		return nil, errHostNamespace
	}
	if net {
		if ns.net, err = openAt(proc, "ns/net"); err != nil {
			ns.close()
			return nil, fmt.Errorf("%s (pid %d): %w", holder.Name, holder.PID, err)
		}
	}
	return ns, nil
}

// openAt opens name below the directory dir, for reading.
func openAt(dir *os.File, name string) (*os.File, error) {
	fd, err := syscall.Openat(int(dir.Fd()), name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", filepath.Join(dir.Name(), name), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// files are the namespaces to hand to nsenter, in enterArgs' order.
func (ns *nodeNamespaces) files() []*os.File {
	if ns.net != nil {
		return []*os.File{ns.mnt, ns.net}
	}
	return []*os.File{ns.mnt}
}

// closeProc closes the holder's /proc directory, keeping the namespaces.
func (ns *nodeNamespaces) closeProc() {
	if ns.proc != nil {
		ns.proc.Close()
		ns.proc = nil
	}
}

func (ns *nodeNamespaces) close() {
	ns.closeProc()
	for _, f := range []*os.File{ns.mnt, ns.net} {
		if f != nil {
			f.Close()
		}
	}
}

// enterArgs are nsenter's arguments, up to the command, for a process that
// is given files() as descriptors 3 and on, joins the namespaces they are,
// and works in dir. nsenter opens /proc/self/fd/N, its own descriptor,
// before it enters anything. Joining a mount namespace moves a process to
// that namespace's root, where cwd-relative files would land on the host's
// /; nor may the directory be carried across (nsenter --wd): the process
// would be in a directory it cannot name (getcwd fails). So a shell closes
// the namespace descriptors, which the command has no use for, changes into
// dir by name once inside, then execs the command, which keeps its PID.
func (ns *nodeNamespaces) enterArgs(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("working directory %q in the node: not an absolute path", dir)
	}
	args := []string{"--mount=/proc/self/fd/3"}
	closeFDs := "exec 3<&-"
	if ns.net != nil {
		args = append(args, "--net=/proc/self/fd/4")
		closeFDs += " 4<&-"
	}
	return append(args, "--", "/bin/sh", "-c", closeFDs+`; cd -- "$1" || exit 126; shift; exec "$@"`, "critlet-enter", dir), nil
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

// fileNamespace identifies the namespace an open nsfs file is.
func fileNamespace(f *os.File) (nsID, error) {
	fi, err := f.Stat()
	if err != nil {
		return nsID{}, fmt.Errorf("%s: %w", f.Name(), err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// inHostMountNamespace reports whether pid shares the host's mount
// namespace.
func inHostMountNamespace(pid int) (bool, error) {
	ns, err := mountNamespace(strconv.Itoa(pid))
	if err != nil {
		return false, err
	}
	return isHostMountNamespace(ns)
}

// isHostMountNamespace reports whether ns is the host's mount namespace:
// this process's, or init's.
func isHostMountNamespace(ns nsID) (bool, error) {
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
	nodeNS, err := n.openNodeNamespaces()
	if errors.Is(err, errHostNamespace) {
		return nil, err
	}
	if err != nil {
		return nil, nil // no namespace, nobody in it
	}
	// The namespace identified by the descriptor opened from the checked
	// holder, not by /proc/PID again: were the PID reused by a host
	// process meanwhile, every host process would be listed.
	ns, holder := nodeNS.mntID, nodeNS.holder
	nodeNS.close()
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
