package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// A machine's processes live in cgroups of its own, one in every
// hierarchy, below this process's: without a host systemd nothing
// delegates a subtree to systemd-nspawn, so the launcher moves itself in
// before it execs it. On cgroup v1 the hierarchies are many (cpu and
// cpuacct apart on this kind of host).

// hierarchy is a mounted cgroup hierarchy and this process's cgroup in it.
type hierarchy struct {
	mount string // e.g. /sys/fs/cgroup/memory
	own   string // this process's cgroup, relative to mount
}

// hierarchies reads the cgroup mounts and this process's place in each.
func hierarchies() ([]hierarchy, error) {
	procCgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseHierarchies(string(procCgroup), string(mountinfo))
}

// cgroupMount is a cgroup hierarchy's mount, from a line of mountinfo.
type cgroupMount struct {
	root, point string
	v2          bool
	// controllers are the controllers, and name=, a v1 mount carries in
	// its super options; none for cgroup2.
	controllers []string
}

// cgroupMountsIn are mountinfo's cgroup mounts, v1 and v2, in its order.
func cgroupMountsIn(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 1 || sf[0] != "cgroup" && sf[0] != "cgroup2" {
			continue
		}
		m := cgroupMount{root: pf[3], point: pf[4], v2: sf[0] == "cgroup2"}
		if !m.v2 && len(sf) >= 3 {
			for _, o := range strings.Split(sf[2], ",") {
				if !slices.Contains(mountOptions, o) && !strings.HasPrefix(o, "release_agent=") {
					m.controllers = append(m.controllers, o)
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// parseHierarchies pairs each cgroup mount of mountinfo with this
// process's line of procCgroup (/proc/self/cgroup): the controllers, or
// name=, a v1 mount carries in its super options; "" for cgroup2.
func parseHierarchies(procCgroup, mountinfo string) ([]hierarchy, error) {
	own := map[string]string{}
	for _, line := range strings.Split(procCgroup, "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			own[parts[1]] = parts[2]
		}
	}
	var hs []hierarchy
	for _, m := range cgroupMountsIn(mountinfo) {
		key := strings.Join(m.controllers, ",")
		p, ok := own[key]
		if !ok {
			return nil, fmt.Errorf("cgroup hierarchy %s (%q) is not in /proc/self/cgroup", m.point, key)
		}
		// A mount of a subtree: the path is relative to its root.
		rel, err := filepath.Rel(m.root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("this process's cgroup %s is outside the mount %s (root %s)", p, m.point, m.root)
		}
		hs = append(hs, hierarchy{mount: m.point, own: rel})
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return hs, nil
}

// mountOptions are a cgroup v1 mount's super options that name no
// controller; so does release_agent=PATH (older systemd sets it on
// name=systemd).
var mountOptions = []string{"rw", "ro", "relatime", "noexec", "nosuid", "nodev", "clone_children", "xattr", "noprefix", "cpuset_v2_mode", "favordynmods"}

// machineCgroups are machine name's cgroups, one per hierarchy (no side
// effects).
func machineCgroups(hs []hierarchy, name string) []string {
	var out []string
	for _, h := range hs {
		out = append(out, filepath.Join(h.mount, h.own, "critlet-machine-"+name))
	}
	return out
}

// makeCgroups makes machine m's cgroups for a boot: those made at an
// earlier boot are kept; any other is recorded before it is made. One that
// exists already is not this cluster's (the names are fixed: another
// cluster's, say): it is refused and taken off the record, so that Down
// leaves it.
func (c *Cluster) makeCgroups(m *Machine) error {
	for _, cg := range m.Cgroups {
		if slices.Contains(m.CgroupsMade, cg) {
			if fi, err := os.Lstat(cg); err == nil && fi.IsDir() {
				continue
			}
		} else {
			m.CgroupsMade = append(m.CgroupsMade, cg)
			if err := c.save(); err != nil {
				return err
			}
		}
		if err := makeCgroup(cg); err != nil {
			if errors.Is(err, fs.ErrExist) {
				m.CgroupsMade = slices.DeleteFunc(m.CgroupsMade, func(s string) bool { return s == cg })
				return errors.Join(err, c.save())
			}
			return err
		}
	}
	return nil
}

// makeCgroup makes cg, which must not exist; cpuset's need their parent's
// CPUs and memory nodes before a process may join.
func makeCgroup(cg string) error {
	if err := os.Mkdir(cg, 0o755); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup %s exists and this cluster did not make it (another cluster's?): %w", cg, err)
	} else if err != nil {
		return fmt.Errorf("making cgroup %s: %w", cg, err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if _, err := os.Stat(filepath.Join(cg, f)); err != nil {
			continue
		}
		v, err := os.ReadFile(filepath.Join(filepath.Dir(cg), f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cg, f), v, 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", cg, f, err)
		}
	}
	return nil
}

// cgroupProcs lists the PIDs in cg and below.
func cgroupProcs(cg string) []string {
	var pids []string
	_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
				pids = append(pids, strings.Fields(string(b))...)
			}
		}
		return nil
	})
	return pids
}

// removeCgroup removes cg and every cgroup below it (the machine's
// systemd, kubelet and containers made those), deepest first. It fails if
// a process is still in one.
func removeCgroup(cg string) error {
	var dirs []string
	err := filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing cgroup %s: %w", d, err)
		}
	}
	return nil
}
