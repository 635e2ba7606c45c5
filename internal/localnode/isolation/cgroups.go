package isolation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts returns the mount points of the host's cgroup hierarchies.
func cgroupMounts() []string {
	infos, err := mounts("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, m := range infos {
		if m.FsType == "cgroup" || m.FsType == "cgroup2" {
			points = append(points, m.MountPoint)
		}
	}
	return points
}

// CreateCgroupRoot makes root in every hierarchy: the kubelet requires its
// cgroupRoot to exist. A new cpuset cgroup starts with no CPUs and no memory
// nodes, so those are copied from the parent.
func CreateCgroupRoot(root string) error {
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

// CgroupDirs returns every directory of root in every hierarchy, deepest
// first.
func CgroupDirs(root string) []string {
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

// CgroupProcs lists the processes in root's cgroups.
func CgroupProcs(root string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, d := range CgroupDirs(root) {
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

// ThawCgroups thaws every frozen cgroup under root: a frozen process cannot
// act on a signal, not even SIGKILL.
func ThawCgroups(root string) {
	for _, d := range CgroupDirs(root) {
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

// KillCgroupProcs kills every process in root's cgroups and waits for them
// to go.
func KillCgroupProcs(root string) error {
	ThawCgroups(root)
	return KillUntilGone("in cgroup "+root, func() ([]int, error) { return CgroupProcs(root), nil })
}

// RemoveCgroups removes root's cgroups, deepest first, in every hierarchy.
func RemoveCgroups(root string) error {
	var errs []error
	for _, d := range CgroupDirs(root) {
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
