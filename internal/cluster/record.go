package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/critlet/critlet/internal/localnode/process"
)

// A record is read back from a file and then acted on as root: its names
// become paths removed, its PIDs processes killed, its cgroups directories
// removed. So each entry must be one this package writes; one that is not
// stops everything before anything is done.

// machineName is the form of the names Up gives machines: n1, n2, …
var machineName = regexp.MustCompile(`^n[1-9][0-9]{0,2}$`)

// maxMachines keeps a machine's address (10.250.0.10+i) in the subnet.
const maxMachines = 244

// pidMax is the kernel's largest PID (PID_MAX_LIMIT).
const pidMax = 1 << 22

// cgroupMountPoints lists the host's cgroup hierarchies' mount points;
// tests stand temporary directories in for them.
var cgroupMountPoints = func() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return cgroupMounts(string(b)), nil
}

// cgroupMounts are the mount points of mountinfo's cgroup hierarchies.
func cgroupMounts(mountinfo string) []string {
	var out []string
	for _, m := range cgroupMountsIn(mountinfo) {
		out = append(out, m.point)
	}
	return out
}

// checkMachineName refuses a name Up does not give: it becomes a path in
// the state directory and a cgroup's name.
func checkMachineName(name string) error {
	if !machineName.MatchString(name) {
		return fmt.Errorf("machine name %q is not one critlet-cluster gives (n1, n2, …)", name)
	}
	return nil
}

// validateRecord checks that every entry of r is one this package records,
// given the host's cgroup mount points; the error names each bad entry.
func validateRecord(r Record, cgroupMounts []string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Hub != nil {
		if err := checkRef(*r.Hub, "hub"); err != nil {
			bad("hub: %w", err)
		}
	}
	names, indexes := map[string]bool{}, map[int]bool{}
	for i, m := range r.Machines {
		if m == nil {
			bad("machine %d: empty", i+1)
			continue
		}
		if err := checkMachineName(m.Name); err != nil {
			bad("machine %d: %w", i+1, err)
			continue // the rest would be checked against a bad name
		}
		if names[m.Name] {
			bad("machine %s: recorded twice", m.Name)
		}
		names[m.Name] = true
		if m.Index < 1 || m.Index > maxMachines || indexes[m.Index] {
			bad("machine %s: index %d is not a free one of 1 to %d", m.Name, m.Index, maxMachines)
		}
		indexes[m.Index] = true
		if m.Addr != MachineAddr(m.Index) {
			bad("machine %s: address %q is not machine %d's", m.Name, m.Addr, m.Index)
		}
		if m.NIC != (process.Ref{}) {
			if err := checkRef(m.NIC, m.Name+" nic"); err != nil {
				bad("machine %s: nic: %w", m.Name, err)
			}
		}
		if m.Boot != nil {
			if err := checkRef(*m.Boot, m.Name); err != nil {
				bad("machine %s: boot: %w", m.Name, err)
			}
		}
		if m.Boots < 0 {
			bad("machine %s: %d boots", m.Name, m.Boots)
		}
		used := map[string]bool{}
		for _, cg := range m.Cgroups {
			mount, err := checkCgroup(cg, m.Name, cgroupMounts)
			if err != nil {
				bad("machine %s: %w", m.Name, err)
			} else if used[mount] {
				bad("machine %s: two cgroups in hierarchy %s", m.Name, mount)
			}
			used[mount] = true
		}
		for _, cg := range m.CgroupsMade {
			if !slices.Contains(m.Cgroups, cg) {
				bad("machine %s: cgroup %q made but not one of the machine's", m.Name, cg)
			}
		}
	}
	for i, d := range r.HostDirs {
		if !slices.Contains(nspawnRunDirs, d) || slices.Contains(r.HostDirs[:i], d) {
			bad("host_dirs: %q is not one of the directories systemd-nspawn makes (%s)", d, strings.Join(nspawnRunDirs, ", "))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("not a record critlet-cluster writes, nothing done: %w", errors.Join(errs...))
	}
	return nil
}

// checkRef checks a recorded process: as startDetached records it, under
// the name given. PID 1, 0 and negatives are never a process of ours (and
// kill(2) reads 0 and -1 as groups); the start time is checked before any
// signal (process.Ref). Its log file is not acted on.
func checkRef(p process.Ref, name string) error {
	if p.Name != name {
		return fmt.Errorf("process named %q, not %q", p.Name, name)
	}
	if p.PID <= 1 || p.PID > pidMax {
		return fmt.Errorf("PID %d is not a process critlet-cluster starts", p.PID)
	}
	return nil
}

// checkCgroup checks that cg is machine name's cgroup below one of the
// hierarchies' mounts, and returns that mount.
func checkCgroup(cg, name string, mounts []string) (string, error) {
	if !filepath.IsAbs(cg) || filepath.Clean(cg) != cg || filepath.Base(cg) != "critlet-machine-"+name {
		return "", fmt.Errorf("cgroup %q is not critlet-machine-%s in a cgroup hierarchy", cg, name)
	}
	for _, m := range mounts {
		if strings.HasPrefix(cg, strings.TrimSuffix(m, "/")+"/") {
			return m, nil
		}
	}
	return "", fmt.Errorf("cgroup %q is not in a cgroup hierarchy mounted on this host (%s)", cg, strings.Join(mounts, ", "))
}
