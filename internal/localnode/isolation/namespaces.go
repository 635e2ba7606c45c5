package isolation

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/critlet/critlet/internal/localnode/process"
)

// Kind is a kind of namespace, named as in /proc/PID/ns.
type Kind string

// The kinds of namespace Open opens.
const (
	Mount  Kind = "mnt"
	UTS    Kind = "uts"
	IPC    Kind = "ipc"
	Net    Kind = "net"
	PID    Kind = "pid"
	Cgroup Kind = "cgroup"
)

// ContainerKinds are what nsenter -a joins in a container that shares the
// host's user and time namespaces (as systemd-nspawn's machines do with
// --private-users=no): nsenter -a skips those equal to its own.
var ContainerKinds = []Kind{Mount, UTS, IPC, Net, PID, Cgroup}

// nsenterOption is nsenter's option joining a namespace of each kind.
var nsenterOption = map[Kind]string{Mount: "--mount", UTS: "--uts", IPC: "--ipc", Net: "--net", PID: "--pid", Cgroup: "--cgroup"}

// Namespaces are a holder's namespaces (a node's, a machine's), opened
// once from the process holding them, through its /proc directory checked
// to be that process (process.Ref.OpenProc), and checked to be none of
// the host's. Entering goes through these descriptors, never /proc/PID
// again: between a check by PID and nsenter opening /proc/PID/ns/* the
// holder may die and its PID go to a host process, whose namespaces, the
// host's, would be entered.
type Namespaces struct {
	holder process.Ref
	proc   *os.File // the holder's /proc directory
	kinds  []Kind
	files  []*os.File // in kinds' order
	ids    []nsID
}

// OpenNamespaces opens a node's namespaces from holder: its mount
// namespace and, with net, its network namespace (Open).
func OpenNamespaces(holder process.Ref, net bool) (*Namespaces, error) {
	if net {
		return Open(holder, Mount, Net)
	}
	return Open(holder, Mount)
}

// Open opens holder's namespaces of the kinds given. One of them that is
// the host's is ErrHostNamespace: a holder not yet in namespaces of its
// own, or a PID taken for the holder that is not.
func Open(holder process.Ref, kinds ...Kind) (*Namespaces, error) {
	if len(kinds) == 0 {
		return nil, errors.New("opening namespaces: no kind named")
	}
	for i, k := range kinds {
		if nsenterOption[k] == "" || slices.Contains(kinds[:i], k) {
			return nil, fmt.Errorf("opening namespaces: kind %q unknown or named twice", k)
		}
	}
	proc, err := holder.OpenProc()
	if err != nil {
		return nil, err
	}
	ns := &Namespaces{holder: holder, proc: proc, kinds: slices.Clone(kinds)}
	for _, k := range kinds {
		f, err := openAt(proc, "ns/"+string(k))
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("%s (pid %d): %w", holder.Name, holder.PID, err)
		}
		ns.files = append(ns.files, f)
		id, err := fileNamespace(f)
		if err != nil {
			ns.Close()
			return nil, err
		}
		ns.ids = append(ns.ids, id)
		host, err := isHostNamespace(k, id)
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("%s (pid %d): its %s namespace: %w", holder.Name, holder.PID, k, err)
		}
		if host {
			ns.Close()
			return nil, fmt.Errorf("%w: %s (pid %d): its %s namespace is the host's", ErrHostNamespace, holder.Name, holder.PID, k)
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

// Holder is the process the namespaces were opened from.
func (ns *Namespaces) Holder() process.Ref { return ns.holder }

// Files are the namespaces to hand to nsenter, in EnterArgs' order.
func (ns *Namespaces) Files() []*os.File { return slices.Clone(ns.files) }

// file is the namespace of kind k, nil when not opened.
func (ns *Namespaces) file(k Kind) *os.File {
	if i := slices.Index(ns.kinds, k); i >= 0 {
		return ns.files[i]
	}
	return nil
}

// Same reports whether ns and other are in the same namespace of kind k;
// both must have it open.
func (ns *Namespaces) Same(k Kind, other *Namespaces) (bool, error) {
	i, j := slices.Index(ns.kinds, k), slices.Index(other.kinds, k)
	if i < 0 || j < 0 {
		return false, fmt.Errorf("comparing %s namespaces: not opened from both %s and %s", k, ns.holder.Name, other.holder.Name)
	}
	return ns.ids[i] == other.ids[j], nil
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
	for _, f := range ns.files {
		f.Close()
	}
}

// EnterArgs are nsenter's arguments, up to the command, for a process that
// is given Files() as descriptors 3 and on, joins the namespaces they are,
// and works in dir. nsenter opens /proc/self/fd/N, its own descriptor,
// before it enters anything (and forks to enter a PID namespace). Joining
// a mount namespace moves a process to that namespace's root, where
// cwd-relative files would land on the host's /; nor may the directory be
// carried across (nsenter --wd): the process would be in a directory it
// cannot name (getcwd fails). So a shell closes the namespace descriptors,
// which the command has no use for, changes into dir by name once inside,
// then execs the command, which keeps its PID. Descriptors given after
// Files() stay open for the command.
func (ns *Namespaces) EnterArgs(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("working directory %q in %s's namespaces: not an absolute path", dir, ns.holder.Name)
	}
	var args []string
	closeFDs := "exec"
	for i, k := range ns.kinds {
		fd := strconv.Itoa(3 + i)
		args = append(args, nsenterOption[k]+"=/proc/self/fd/"+fd)
		closeFDs += " " + fd + "<&-"
	}
	return append(args, "--", "/bin/sh", "-c", closeFDs+`; cd -- "$1" || exit 126; shift; exec "$@"`, "critlet-enter", dir), nil
}

// ErrHostNamespace marks a process taken for a namespace holder that is in
// one of the host's namespaces.
var ErrHostNamespace = errors.New("the namespace holder is in a namespace of the host's")

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

// mountNamespace identifies pid's mount namespace.
func mountNamespace(pid string) (nsID, error) { return namespace(pid, Mount) }

// namespace identifies pid's namespace of kind k.
func namespace(pid string, k Kind) (nsID, error) {
	fi, err := os.Stat(filepath.Join("/proc", pid, "ns", string(k)))
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
	return isHostNamespace(Mount, ns)
}

// isHostNamespace reports whether ns is the host's namespace of kind k:
// this process's, or init's.
func isHostNamespace(k Kind, ns nsID) (bool, error) {
	self, err := namespace("self", k)
	if err != nil {
		return false, err
	}
	// init's may be out of reach (no CAP_SYS_PTRACE): this process's is
	// then the host's that counts.
	initNS, err := namespace("1", k)
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
	mnt := ns.file(Mount)
	if mnt == nil {
		return fmt.Errorf("unmounting in %s's namespaces: its mount namespace is not open", ns.holder.Name)
	}
	for _, m := range mounts {
		cmd := exec.Command("nsenter", "--mount=/proc/self/fd/3", "--", "umount", "--lazy", m)
		cmd.ExtraFiles = []*os.File{mnt}
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
	i := slices.Index(ns.kinds, Mount)
	if i < 0 {
		return nil, fmt.Errorf("listing who joined %s's namespaces: its mount namespace is not open", ns.holder.Name)
	}
	mntID := ns.ids[i]
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
		if id, err := mountNamespace(e.Name()); err != nil || id != mntID {
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
