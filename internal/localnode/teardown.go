package localnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
)

// Down stops every component recorded under cfg.StateDir and removes what
// the node created: pod sandboxes and their processes, shims, cgroups, the
// CNI bridge, mounts, host mount points and all state but the logs. It goes
// on after a failed step, so that one stuck piece does not leave the rest
// behind, and reports every failure.
func Down(cfg Config) error {
	return withHostLock(func() error { return down(cfg) })
}

func down(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	n := &Node{cfg: cfg, l: layout{cfg.StateDir}}
	// Only a directory a node has claimed is touched: a mistyped state
	// directory must not lose its contents.
	if err := checkStateDir(cfg.StateDir); err != nil {
		return err
	}
	if _, err := os.Lstat(n.l.path(markerFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", cfg.StateDir, ErrNotANode)
	}
	// The fixed-name host resources belong to whichever node claimed them
	// last; another node's are left alone.
	owns := hostOwner() == cfg.StateDir
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	stop := func(name string, grace time.Duration) { note(n.stopComponent(name, grace)) }

	stop(Kubelet, 10*time.Second)
	// Whatever else joined the node (a suite and the kubelet it started)
	// goes before the sandboxes, so that nobody starts them again.
	note(n.killJoined())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := n.removeSandboxes(ctx); err != nil {
		// Not fatal: what the runtime cannot remove is killed below.
		fmt.Fprintf(os.Stderr, "local node: removing pod sandboxes through CRI: %v\n", err)
	}
	cancel()
	stop(Containerd, 10*time.Second)
	note(killShims(n.l.criSocket()))
	if owns {
		note(killCgroupProcs(CgroupRoot))
		note(removeCgroups(CgroupRoot))
	}
	stop(APIServer, 10*time.Second)
	stop(Etcd, 10*time.Second)

	if owns {
		note(deleteBridge())
		for _, d := range n.l.createdHostDirs() {
			// Only empty directories: anything inside is somebody else's.
			note(removeEmptyTree(d))
		}
		if err := os.Remove(ownerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			note(err)
		}
	}
	note(unmountUnder(cfg.StateDir))
	// Only what Up creates goes; the logs stay, as they explain a failure
	// after the fact.
	for _, name := range stateEntries {
		note(removeAll(n.l.path(name)))
	}
	return errors.Join(errs...)
}

// stateEntries are what Up creates in the state directory, besides logs
// and the marker, which stay: the directory remains the node's.
var stateEntries = []string{"run", "pki", "etcd", "apiserver", "containerd", "cni", "images", "kubelet", "mounts", "sysctl", "host-dirs"}

func deleteBridge() error {
	// Without ip(8) Up never started, so there is no bridge.
	if _, err := exec.LookPath("ip"); err != nil {
		return nil
	}
	out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "does not exist") {
			return nil
		}
		return fmt.Errorf("checking network device %s: %v: %s", BridgeName, err, out)
	}
	if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting network device %s: %v: %s", BridgeName, err, out)
	}
	return nil
}

// killShims kills the runc shims that serve the containerd at socket; they
// outlive containerd by design.
func killShims(socket string) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing shim %d: %w", pid, err)
		}
	}
	// Their state is removed next: wait until they are gone.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for process.Runs(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("shim %d survived SIGKILL", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// cgroupMounts returns the mount points of the host's cgroup hierarchies.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// fields: id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
				mounts = append(mounts, unescapeMount(fields[4]))
			}
		}
	}
	return mounts
}

// createCgroupRoot makes root in every hierarchy: the kubelet requires its
// cgroupRoot to exist. A new cpuset cgroup starts with no CPUs and no memory
// nodes, so those are copied from the parent.
func createCgroupRoot(root string) error {
	for _, m := range cgroupMounts() {
		dir := filepath.Join(m, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			cur, _ := os.ReadFile(filepath.Join(dir, f))
			if strings.TrimSpace(string(cur)) != "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// cgroupDirs returns every directory of root in every hierarchy, deepest
// first.
func cgroupDirs(root string) []string {
	var dirs []string
	for _, m := range cgroupMounts() {
		base := filepath.Join(m, root)
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// cgroupProcs lists the processes in root's cgroups.
func cgroupProcs(root string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, d := range cgroupDirs(root) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// thawCgroups thaws every frozen cgroup under root: a frozen process cannot
// act on a signal, not even SIGKILL.
func thawCgroups(root string) {
	for _, d := range cgroupDirs(root) {
		for _, f := range []string{"freezer.state", "cgroup.freeze"} {
			p := filepath.Join(d, f)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			v := "THAWED"
			if f == "cgroup.freeze" {
				v = "0"
			}
			_ = os.WriteFile(p, []byte(v), 0o644)
		}
	}
}

// killCgroupProcs kills every process in root's cgroups and waits for them
// to go.
func killCgroupProcs(root string) error {
	thawCgroups(root)
	return killUntilGone("in cgroup "+root, func() ([]int, error) { return cgroupProcs(root), nil })
}

// killUntilGone sends SIGKILL to the processes list returns until it
// returns none, for at most 15 seconds; what says where they are, for the
// error.
func killUntilGone(what string, list func() ([]int, error)) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids, err := list()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v %s survived SIGKILL", pids, what)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing process %d %s: %w", pid, what, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes root's cgroups, deepest first, in every hierarchy.
func removeCgroups(root string) error {
	var errs []error
	for _, d := range cgroupDirs(root) {
		var err error
		for i := 0; i < 50; i++ {
			// A cgroup is busy for a moment after its last process exits;
			// one that still holds processes will not empty by waiting.
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(strings.TrimSpace(string(procs))) > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder lazily unmounts every host mount below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder("/proc/self/mountinfo", dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points below dir in a mountinfo file, deepest
// first, the order they can be unmounted in.
func mountsUnder(mountinfo, dir string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// fields: id parent major:minor root mountpoint ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			if mp := unescapeMount(fields[4]); strings.HasPrefix(mp, dir+"/") {
				mounts = append(mounts, mp)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", mountinfo, err)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeAll removes a directory tree; read-only directories (Go's module
// copies) are made writable first.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// removeEmptyTree removes dir and its empty subdirectories, and leaves
// anything that holds files.
func removeEmptyTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s was created by the local node but is not empty: left in place: %w", dir, err)
	}
	return nil
}
