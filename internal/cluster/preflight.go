package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
)

// Before Up (or Create) touches anything on the host, the host is checked
// for what the cluster cannot run without, and refused with every problem
// at once, each saying what to do (HostError). checkHost is the check, on
// what was read of the host (hostFacts); readHost and Cluster.preflight do
// the reading.

// minFree is the free space Up wants on the state directory's file
// system: 5 GiB. A cluster of three machines takes about 3.8 GiB there,
// added up from the sizes of what Up writes, as built on this project's
// machines (not a du of a running cluster): each
// machine's root unpacked from the image (355 MiB, three times), the .debs
// copied into each machine (kubelet and kubeadm, kubectl on n1: 330 MiB in
// all) and what they install (the kubelet's and kubeadm's binaries on each,
// kubectl on n1: 885 MiB), the control plane's images on n1 (kube-apiserver,
// kube-controller-manager, kube-scheduler and etcd, about 460 MiB uncompressed)
// held three times (the archive imported, containerd's content store, its
// unpacked snapshot: 1.4 GiB), the stand-in packages (140 MiB). The rest is
// room for etcd's preallocated WAL, the machines' journals and containers.
const minFree = 5 << 30

// requiredControllers are the cgroup v1 hierarchies the machines need:
// name=systemd for their systemd (252, on cgroup v1), and in the kubelet's
// and runc's words: cpu, cpuacct, cpuset and memory (the kubelet's
// container manager refuses to start without one), pids (the kubelet's
// pod cgroups), devices (runc refuses a container without it).
var requiredControllers = []string{"name=systemd", "cpu", "cpuacct", "cpuset", "memory", "pids", "devices"}

// A tool is a program Up or Create runs: a name looked up on PATH, or a
// path; remedy says how to get it.
type tool struct{ name, remedy string }

const clusterDeps = " (make cluster-deps does)"

// machineTools are what making and booting machines runs on the host
// (Create): the launcher's shell and systemd-nspawn, tar to unpack a root,
// unshare and sleep to hold a network namespace, nsenter, ip and sysctl to
// set it up.
var machineTools = []tool{
	{"sh", "install Debian's dash"},
	{"systemd-nspawn", "install Debian's systemd-container, of the host's systemd version" + clusterDeps},
	{"tar", "install Debian's tar"},
	{"unshare", "install Debian's util-linux" + clusterDeps},
	{"nsenter", "install Debian's util-linux" + clusterDeps},
	{"sleep", "install Debian's coreutils"},
	{"ip", "install Debian's iproute2" + clusterDeps},
	{"sysctl", "install Debian's procps" + clusterDeps},
}

// upTools are what Up runs or reads besides machineTools: ldd (the control
// plane's images carry the libraries it names), the workload image's
// busybox, mmdebstrap when the machine image is to be built, and what make
// builds into in.BinDir.
func upTools(in Inputs, buildImage bool) []tool {
	ts := []tool{
		{"ldd", "install Debian's libc-bin"},
		{"/bin/busybox", "install Debian's busybox-static" + clusterDeps},
	}
	if buildImage {
		ts = append(ts, tool{"mmdebstrap", "install Debian's mmdebstrap" + clusterDeps + ": the machine image is built once into " + in.ImageCache})
	}
	for _, b := range []string{"kubeadm", "kubectl", "kubelet-stock", "nfpm", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pause"} {
		ts = append(ts, tool{filepath.Join(in.BinDir, b), "build it: make cluster-up does"})
	}
	return ts
}

// hostFacts are what the preflight read of the host.
type hostFacts struct {
	EUID       int
	Mountinfo  string // /proc/self/mountinfo
	ProcCgroup string // /proc/self/cgroup
	PID1Comm   string // /proc/1/comm
	PID1Exe    string // /proc/1/exe's target; "" when it cannot be read
	// LookPath finds a tool (exec.LookPath): on PATH, or a path.
	LookPath func(string) (string, error)
	Tools    []tool
	StateDir string
	Free     uint64 // bytes free to users on StateDir's file system
	// WantDeb: critlet's package is to be installed (Up), and Debs are
	// the kubelet-critlet .debs found in PackageDir.
	WantDeb    bool
	PackageDir string
	Debs       []string
}

// A Problem is what the host lacks for a cluster, and what to do.
type Problem struct{ What, Remedy string }

// HostError is a host refused before anything was made on it.
type HostError struct{ Problems []Problem }

func (e *HostError) Error() string {
	var b strings.Builder
	b.WriteString("this host cannot run the cluster; nothing was made (docs/cluster.md, \"What a host needs\"):")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  - %s\n    %s", p.What, p.Remedy)
	}
	return b.String()
}

// checkHost is the preflight's verdict on f: every problem, none when the
// cluster can run.
func checkHost(f hostFacts) []Problem {
	var ps []Problem
	if f.EUID != 0 {
		ps = append(ps, Problem{fmt.Sprintf("running as uid %d, not root", f.EUID),
			"run it as root (sudo): it makes cgroups, network namespaces and machines"})
	}
	ps = append(ps, checkCgroups(f.Mountinfo, f.ProcCgroup)...)
	if f.PID1Comm == "systemd" || filepath.Base(f.PID1Exe) == "systemd" {
		exe := f.PID1Exe
		if exe == "" {
			exe = "unreadable"
		}
		ps = append(ps, Problem{
			fmt.Sprintf("PID 1 is systemd (/proc/1/comm %q, /proc/1/exe %s): the machines would be started by systemd-nspawn --register=no --keep-unit with their cgroups made inside systemd's own tree, which systemd did not delegate and may move or remove", f.PID1Comm, exe),
			"hosts with systemd as PID 1 are not supported (nothing registers the machines with systemd-machined or asks systemd for a delegated scope): use a host, VM or container whose PID 1 is not systemd, as this project's CI machines are"})
	}
	for _, t := range f.Tools {
		if _, err := f.LookPath(t.name); err != nil {
			what := t.name + " is not on PATH"
			if strings.Contains(t.name, "/") {
				what = t.name + " is missing or not executable"
			}
			ps = append(ps, Problem{what, t.remedy})
		}
	}
	switch {
	case !f.WantDeb:
	case len(f.Debs) == 0:
		ps = append(ps, Problem{fmt.Sprintf("no kubelet-critlet .deb for %s in %s", runtime.GOARCH, f.PackageDir),
			"build it: make package (make cluster-up does)"})
	case len(f.Debs) > 1:
		ps = append(ps, Problem{fmt.Sprintf("%d kubelet-critlet .debs for %s in %s, which one to install is not clear: %s", len(f.Debs), runtime.GOARCH, f.PackageDir, strings.Join(f.Debs, ", ")),
			"remove all but the one to install, or remove them all and run make package"})
	}
	if f.Free < minFree {
		ps = append(ps, Problem{
			fmt.Sprintf("%s free on the file system of the state directory %s, where a cluster of three machines takes about 3.8 GiB (their roots, packages and the control plane's images)", gib(f.Free), f.StateDir),
			fmt.Sprintf("make %s free there, or choose a state directory on another file system (critlet-cluster up --state DIR; CLUSTER_STATE=DIR with make)", gib(minFree))})
	}
	return ps
}

// gib is n in GiB, rounded down: just short of 5 GiB is not "5.0 GiB".
func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n*10/(1<<30))/10) }

// checkCgroups reports what the machines lack of mountinfo's cgroup
// hierarchies: cgroup v1 with requiredControllers, this process in each
// hierarchy (parseHierarchies, given procCgroup).
func checkCgroups(mountinfo, procCgroup string) []Problem {
	have := map[string]bool{}
	var v1, v2 []string
	for _, m := range cgroupMountsIn(mountinfo) {
		if m.v2 {
			v2 = append(v2, m.point)
			continue
		}
		v1 = append(v1, m.point)
		for _, c := range m.controllers {
			have[c] = true
		}
	}
	v1Remedy := "use a host, or a VM, whose cgroup controllers are cgroup v1 hierarchies (one mount under /sys/fs/cgroup each, cgroup2 beside them at most), as this project's CI machines are: cgroup v2 hosts are not supported"
	switch {
	case len(v1) == 0 && len(v2) == 0:
		return []Problem{{"no cgroup hierarchy is mounted (none in /proc/self/mountinfo)", v1Remedy}}
	case len(v1) == 0:
		return []Problem{{fmt.Sprintf("cgroup v2 only (the unified hierarchy: cgroup2 at %s, no cgroup v1 hierarchy): the machines' systemd (252) and kubelet run on the cgroup v1 controllers systemd-nspawn gives them, made writable inside (docs/cluster.md); nothing here is made for cgroup v2", strings.Join(v2, ", ")), v1Remedy}}
	}
	var missing []string
	for _, c := range requiredControllers {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		where := "not mounted"
		if len(v2) > 0 {
			where = "on cgroup2 at " + strings.Join(v2, ", ") + " (a hybrid host), or not mounted"
		}
		return []Problem{{fmt.Sprintf("cgroup controllers %s are not cgroup v1 hierarchies here (%s): the machines get only the v1 ones, and need %s there", strings.Join(missing, ", "), where, strings.Join(requiredControllers, ", ")),
			"give each its cgroup v1 hierarchy (mounted under /sys/fs/cgroup; not in cgroup_no_v1= on the kernel command line), or " + v1Remedy}}
	}
	if _, err := parseHierarchies(procCgroup, mountinfo); err != nil {
		return []Problem{{"this process's cgroups: " + err.Error(),
			"run critlet-cluster in the host's cgroup namespace, where /proc/self/cgroup names this process's cgroup in every mounted hierarchy"}}
	}
	return nil
}

// readHost reads the host's facts for the preflight: the cgroup mounts
// and this process's cgroups, PID 1, the free space where stateDir is
// (or would be made). Tests stand hosts of their own in.
var readHost = func(stateDir string) (hostFacts, error) {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return hostFacts{}, err
	}
	procCgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return hostFacts{}, err
	}
	comm, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return hostFacts{}, err
	}
	// Unreadable without ptrace access to PID 1 (in a container, say):
	// its comm still says.
	exe, _ := os.Readlink("/proc/1/exe")
	free, err := freeBytes(stateDir)
	if err != nil {
		return hostFacts{}, err
	}
	return hostFacts{
		EUID: os.Geteuid(), Mountinfo: string(mountinfo), ProcCgroup: string(procCgroup),
		PID1Comm: strings.TrimSpace(string(comm)), PID1Exe: exe,
		LookPath: exec.LookPath, StateDir: stateDir, Free: free,
	}, nil
}

// freeBytes is the space free to users on dir's file system, or on its
// nearest existing parent's when dir is not made yet.
func freeBytes(dir string) (uint64, error) {
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(dir, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			return 0, fmt.Errorf("free space of %s: %w", dir, err)
		}
		dir = filepath.Dir(dir)
	}
}

// critletDebs are the kubelet-critlet .debs for this architecture in dir.
func critletDebs(dir string) []string {
	debs, _ := filepath.Glob(filepath.Join(dir, "kubelet-critlet_*_"+runtime.GOARCH+".deb"))
	return debs
}

// preflight refuses a host the cluster cannot run on (checkHost), before
// anything is made: in is Up's inputs, nil for Create, which needs only
// machineTools. Once passed, it is not repeated.
func (c *Cluster) preflight(in *Inputs) error {
	if c.preflighted {
		return nil
	}
	f, err := readHost(c.dir)
	if err != nil {
		return fmt.Errorf("reading the host before making anything: %w", err)
	}
	f.Tools = slices.Clone(machineTools)
	if in != nil {
		_, err := os.Stat(imagePath(in.ImageCache))
		f.Tools = append(f.Tools, upTools(*in, err != nil)...)
		f.WantDeb, f.PackageDir, f.Debs = true, in.PackageDir, critletDebs(in.PackageDir)
	}
	if ps := checkHost(f); len(ps) > 0 {
		return &HostError{ps}
	}
	c.preflighted = true
	return nil
}
