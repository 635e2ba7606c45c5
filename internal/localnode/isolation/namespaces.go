package isolation

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/critlet/critlet/internal/localnode/process"
)

// Namespaces are the node's namespaces, opened once from the process
// holding them, through its /proc directory checked to be that process
// (process.Ref.OpenProc), and checked to be none of the host's. Entering
// goes through these descriptors, never /proc/PID again: between a check
// by PID and nsenter opening /proc/PID/ns/* the holder may die and its
// PID go to a host process, whose namespaces, the host's, would be
// entered.
type Namespaces struct {
	holder process.Ref
	proc   *os.File // the holder's /proc directory
	mnt    *os.File
	net    *os.File // a RuntimeOnly node's; nil otherwise
	mntID  nsID
}

// OpenNamespaces opens holder's mount namespace and, with net, its network
// namespace. A holder in the host's mount namespace is ErrHostNamespace.
func OpenNamespaces(holder process.Ref, net bool) (*Namespaces, error) {
	proc, err := holder.OpenProc()
	if err != nil {
		return nil, err
	}
	ns := &Namespaces{holder: holder, proc: proc}
	if ns.mnt, err = openAt(proc, "ns/mnt"); err != nil {
		ns.Close()
		return nil, fmt.Errorf("%s (pid %d): %w", holder.Name, holder.PID, err)
	}
	if ns.mntID, err = fileNamespace(ns.mnt); err != nil {
		ns.Close()
		return nil, err
	}
	host, err := isHostMountNamespace(ns.mntID)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("the node's mount namespace: %w", err)
	}
	if host {
		ns.Close()
		return nil, ErrHostNamespace
	}
	if net {
		if ns.net, err = openAt(proc, "ns/net"); err != nil {
			ns.Close()
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

// Files are the namespaces to hand to nsenter, in EnterArgs' order.
func (ns *Namespaces) Files() []*os.File {
	if ns.net != nil {
		return []*os.File{ns.mnt, ns.net}
	}
	return []*os.File{ns.mnt}
}

// CloseProc closes the holder's /proc directory, keeping the namespaces.
func (ns *Namespaces) CloseProc() {
	if ns.proc != nil {
		ns.proc.Close()
		ns.proc = nil
	}
}

// Close closes the holder's /proc directory and the namespaces.
func (ns *Namespaces) Close() {
	ns.CloseProc()
	for _, f := range []*os.File{ns.mnt, ns.net} {
		if f != nil {
			f.Close()
		}
	}
}

// EnterArgs are nsenter's arguments, up to the command, for a process that
// is given Files() as descriptors 3 and on, joins the namespaces they are,
// and works in dir. nsenter opens /proc/self/fd/N, its own descriptor,
// before it enters anything. Joining a mount namespace moves a process to
// that namespace's root, where cwd-relative files would land on the host's
// /; nor may the directory be carried across (nsenter --wd): the process
// would be in a directory it cannot name (getcwd fails). So a shell closes
// the namespace descriptors, which the command has no use for, changes into
// dir by name once inside, then execs the command, which keeps its PID.
func (ns *Namespaces) EnterArgs(dir string) ([]string, error) {
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

// ErrHostNamespace marks a process taken for the node's namespace holder
// that is in the host's mount namespace.
var ErrHostNamespace = errors.New("the node's namespace holder is in the host's mount namespace")

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

// InHostMountNamespace reports whether pid shares the host's mount
// namespace.
func InHostMountNamespace(pid int) (bool, error) {
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

// Unmount removes the mounts below dir in the namespace, deepest first.
// The mounts are read through the holder's checked /proc directory, and
// unmounted through the namespace opened from it.
func (ns *Namespaces) Unmount(dir string) error {
	mounts, err := MountsUnder(fmt.Sprintf("/proc/self/fd/%d/mountinfo", ns.proc.Fd()), dir)
	if err != nil {
		return fmt.Errorf("the node namespace's mounts: %w", err)
	}
	for _, m := range mounts {
		cmd := exec.Command("nsenter", "--mount=/proc/self/fd/3", "--", "umount", "--lazy", m)
		cmd.ExtraFiles = []*os.File{ns.mnt}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("unmounting %s in the node's namespace: %v: %s", m, err, out)
		}
	}
	return nil
}

// Joined lists the processes in the mount namespace other than its holder
// and containerd's shims: those that joined it, such as kubelets and
// commands, and their children. Containers are not among them: runc gives
// each a mount namespace of its own. The namespace is the one identified
// by the descriptor opened from the checked holder, not by /proc/PID again:
// were the PID reused by a host process meanwhile, every host process would
// be listed.
func (ns *Namespaces) Joined() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ns.holder.PID {
			continue
		}
		if id, err := mountNamespace(e.Name()); err != nil || id != ns.mntID {
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
