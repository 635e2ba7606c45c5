// Package hoststate records the parts of a host that a node run must leave as
// it found them (sysctls, mounts, cgroups, network devices and firewall
// rules) and reports what differs between two records. A record holds only
// what a suite could make (a Scope): other processes on the machine create
// and remove their own cgroups, devices and mounts meanwhile. Its process listing
// (Processes), which misses no process for being in the middle of exec,
// serves the local node's shim killer too.
package hoststate

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// State maps an item ("sysctl vm/overcommit_memory", "mount /run/netns", …)
// to its value; an absent item is absent from the map.
type State map[string]string

// Sysctls are the keys a kubelet and a CNI bridge would set on a host.
var Sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables", "net/ipv4/conf/all/route_localnet",
}

// Scope is what a suite could make on a host; a record holds that and
// nothing else, so that what other processes create and remove meanwhile
// (systemd's transient scopes, other sandboxes' cgroups, their devices and
// mounts) never makes two records differ, while the suite's own leaks do.
type Scope struct {
	// Cgroups are patterns (path.Match) of a cgroup's path relative to its
	// hierarchy's root, one or two levels deep ("critlet", "critlet/*").
	Cgroups []string
	// Links are patterns of network devices' names; Bridges are patterns
	// of bridges whose ports are recorded too, whatever their names.
	Links, Bridges []string
	// Mounts are directories: mount points at or below them are recorded.
	Mounts []string
}

// Capture records the host as the calling process sees it, within scope.
// Items that cannot be read on this host are left out, on both sides of a
// comparison.
func Capture(scope Scope) (State, error) {
	s := State{}
	for _, k := range Sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s["sysctl "+k] = strings.TrimSpace(string(v))
		}
	}
	mounts, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var cgroupRoots []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			cgroupRoots = append(cgroupRoots, m.point)
		}
		if underAny(m.point, scope.Mounts) {
			s["mount "+m.point] += m.fstype + " "
		}
	}
	s.addCgroups(cgroupRoots, scope.Cgroups)
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		s.addLinks(string(out), scope)
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		out, err := exec.Command(tool).Output()
		if err != nil {
			continue // no kernel support here
		}
		s["rules "+tool] = rules(out)
	}
	return s, nil
}

// matchesAny reports whether name matches one of patterns (path.Match).
func matchesAny(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// underAny reports whether p is one of dirs or below one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		d = filepath.Clean(d)
		if p == d || strings.HasPrefix(p, d+"/") || d == "/" {
			return true
		}
	}
	return false
}

// addLinks records the devices of ipLinks (ip -o link show) named as
// scope.Links or ports of a bridge named as scope.Bridges.
func (s State) addLinks(ipLinks string, scope Scope) {
	for _, line := range strings.Split(ipLinks, "\n") {
		// "5: veth1@if3: <BROADCAST,…> mtu 1500 … master critlet0 state UP …":
		// the name identifies the device.
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")
		mine := matchesAny(name, scope.Links)
		for i := 2; i+1 < len(f) && !mine; i++ {
			mine = f[i] == "master" && matchesAny(f[i+1], scope.Bridges)
		}
		if mine {
			s["link "+name] = "present"
		}
	}
}

// rules drops iptables-save's comment lines, which carry the time, and its
// packet counters.
func rules(out []byte) string {
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasPrefix(line, ":") { // ":CHAIN POLICY [packets:bytes]"
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i]
			}
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// mount is a line of mountinfo: where, and which file system type.
type mount struct{ point, fstype string }

// readMounts reads a mountinfo file. Its mount points are as the kernel
// escapes them (a space is \040), on both sides of a comparison.
func readMounts(mountinfo string) ([]mount, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// fields: id parent major:minor root mountpoint options … - fstype source …
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		m := mount{point: f[4]}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				m.fstype = f[i+1]
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// addCgroups records the cgroups in the top two levels below each of roots
// (where a kubelet would make its cgroup root, QoS classes and system
// cgroups) whose path relative to the root matches one of patterns.
func (s State) addCgroups(roots, patterns []string) {
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if rel == "." {
				return nil
			}
			if matchesAny(rel, patterns) {
				s["cgroup "+p] = "present"
			}
			if strings.Contains(rel, "/") {
				return fs.SkipDir
			}
			return nil
		})
	}
}

// Diff lists, sorted, each item that differs between before and after.
func Diff(before, after State) []string {
	var out []string
	for k, v := range before {
		switch w, ok := after[k]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: gone (was %q)", k, v))
		case w != v:
			out = append(out, fmt.Sprintf("%s: %q, was %q", k, w, v))
		}
	}
	for k, w := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new (%q)", k, w))
		}
	}
	sort.Strings(out)
	return out
}
