// Package hoststate records the parts of a host that a node run must leave as
// it found them (sysctls, mounts, cgroups, network devices and firewall
// rules) and reports what differs between two records. Its process listing
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

// Capture records the host as the calling process sees it. Items that
// cannot be read on this host are left out, on both sides of a comparison.
func Capture() (State, error) {
	s := State{}
	for _, k := range Sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s["sysctl "+k] = strings.TrimSpace(string(v))
		}
	}
	if err := s.addMounts("/proc/self/mountinfo"); err != nil {
		return nil, err
	}
	s.addCgroups()
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			// "3: critlet0: <BROADCAST,…> …": the name identifies the device.
			if f := strings.Fields(line); len(f) > 1 {
				s["link "+strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")] = "present"
			}
		}
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

func (s State) addMounts(mountinfo string) error {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// fields: id parent major:minor root mountpoint options … - fstype source …
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		fstype := ""
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				fstype = f[i+1]
			}
		}
		s["mount "+f[4]] += fstype + " "
	}
	return sc.Err()
}

// addCgroups records the cgroups two levels below each hierarchy's root:
// where a kubelet would make its cgroup root, QoS classes and system
// cgroups.
func (s State) addCgroups() {
	var roots []string
	for k, v := range s {
		if strings.HasPrefix(k, "mount ") && (strings.HasPrefix(v, "cgroup ") || strings.HasPrefix(v, "cgroup2 ")) {
			roots = append(roots, strings.TrimPrefix(k, "mount "))
		}
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if strings.Count(rel, "/") >= 2 {
				return fs.SkipDir
			}
			if rel != "." {
				s["cgroup "+p] = "present"
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
