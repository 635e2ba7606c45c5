package hoststate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// maxListed bounds a directory listing, so that a busy directory cannot
// make a record huge; a longer listing is recorded as cut.
const maxListed = 5000

// NodePaths are the host paths a node may touch: the mount points its
// namespace covers, where a kubelet would put pod logs and CNI state, the
// owner file, and where a kubelet, kube-apiserver or kubeadm left to their
// defaults write (volume plugins, the API server's certificates, kubeadm's
// configuration). Only the host lock stays after a node, by design.
var NodePaths = []string{"/run/containerd", "/run/netns", "/var/lib/cni", "/var/lib/kubelet",
	"/var/log/pods", "/var/log/containers", "/etc/cni", "/run/critlet-local-node.owner",
	"/usr/libexec/kubernetes", "/run/kubernetes", "/etc/kubernetes", "/var/lib/etcd"}

// AddEntries records the entries of dir itself (names, each with its
// type), not below them: what a node run must leave as it found it in a
// directory too big to walk, such as /, where a process started in the
// wrong working directory would leave its files.
func (s State) AddEntries(dir string) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s["entries "+dir] = "absent"
		return
	case err != nil:
		s["entries "+dir] = "unreadable: " + err.Error()
		return
	}
	var names []string
	for _, e := range entries {
		if len(names) >= maxListed {
			names = append(names, "… cut")
			break
		}
		names = append(names, e.Name()+" "+e.Type().String())
	}
	s["entries "+dir] = strings.Join(names, "\n")
}

// AddFiles records the paths below each of dirs (relative, sorted, each
// with its type), and whether the directory exists: what a node run must
// leave as it found it in the host directories it touches. skip names
// paths (absolute) left out of the record.
func (s State) AddFiles(dirs []string, skip ...string) {
	for _, dir := range dirs {
		var entries []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir {
					return err
				}
				entries = append(entries, p+" unreadable")
				return nil
			}
			if p == dir || slices.Contains(skip, p) {
				return nil
			}
			if len(entries) >= maxListed {
				entries = append(entries, "… cut")
				return fs.SkipAll
			}
			rel, _ := filepath.Rel(dir, p)
			entries = append(entries, rel+" "+d.Type().String())
			return nil
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
			s["files "+dir] = "absent"
		case err != nil:
			s["files "+dir] = "unreadable: " + err.Error()
		default:
			slices.Sort(entries)
			s["files "+dir] = strings.Join(entries, "\n")
		}
	}
}

// AddProcesses records the processes that belong to a node: those in a
// cgroup whose path holds cgroupMark, or whose command line holds one of
// pathMarks (a state directory). Before a node starts and after it is
// removed there must be none.
func (s State) AddProcesses(cgroupMark string, pathMarks ...string) error {
	procs, err := Processes()
	if err != nil {
		return err
	}
	self := os.Getpid()
	var found []string
	for _, p := range procs {
		if p.PID == self {
			continue
		}
		cgroup, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "cgroup"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Join(p.Args, " ")
		mine := strings.Contains(string(cgroup), cgroupMark)
		for _, m := range pathMarks {
			mine = mine || strings.Contains(args, m)
		}
		if mine {
			found = append(found, fmt.Sprintf("%d %s", p.PID, args))
		}
	}
	slices.Sort(found)
	s["processes of the node"] = strings.Join(found, "\n")
	return nil
}

// NodeScope is what a suite's nodes could make on the host, and nothing
// other processes on a machine make and remove meanwhile:
//   - cgroups at the top of a hierarchy named as the local node's root
//     (and the two levels below it), a cluster machine's, or what a
//     kubelet, a container runtime or upstream's node suite left to their
//     defaults would make; below those only the node's own (another
//     kubelet on the machine makes and removes pods there);
//   - the node's bridges and their ports (veths of the node's pods);
//   - mounts wherever the node's namespace mounts (the node paths, /proc/sys,
//     /var/log, covered programs, private directories under /run), the
//     cgroup file systems, systemd-nspawn's run directory and stateDirs
//     (as mountinfo names them, links resolved).
func NodeScope(stateDirs ...string) Scope {
	mounts := []string{"/sys/fs/cgroup", "/proc/sys", "/var/log", "/run/systemd", "/run/dbus", "/usr", "/bin", "/sbin"}
	mounts = append(mounts, NodePaths...)
	for _, d := range stateDirs {
		mounts = append(mounts, d)
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			mounts = append(mounts, real)
		}
	}
	return Scope{
		Cgroups: []string{"critlet", "critlet/*", "critlet-*", "kubepods*", "k8s.io",
			"kubelet", "kubelet.slice", "runtime.slice", "system", "docker-daemon", "kube-reserved*", "system-reserved*"},
		Links:   []string{"critlet*"},
		Bridges: []string{"critlet*"},
		Mounts:  mounts,
	}
}

// CaptureNode records what a node run must leave as it found it: Capture's
// items within NodeScope, the files under NodePaths, the entries of /, and
// the processes in the cgroups under cgroupRoot or naming one of stateDirs.
func CaptureNode(cgroupRoot string, stateDirs ...string) (State, error) {
	s, err := Capture(NodeScope(stateDirs...))
	if err != nil {
		return nil, err
	}
	s.AddFiles(NodePaths)
	s.AddEntries("/")
	if err := s.AddProcesses(":"+cgroupRoot, stateDirs...); err != nil {
		return nil, err
	}
	return s, nil
}
