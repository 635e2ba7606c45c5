package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// Hosts' /proc/self/mountinfo and /proc/self/cgroup, as read on each kind.

// thisHost is this project's machines (read on one): every controller a
// cgroup v1 hierarchy of its own, cgroup2 beside them at unified, the
// memory hierarchy at a sub-path for this process; PID 1 is not systemd.
const (
	thisHostMountinfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12335116k,nr_inodes=3083779,mode=755
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	thisHostCgroup = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/9232f21a6f338b11e562ed7aa8e6beb6
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`
)

// legacy is a cgroup v1 host with no cgroup2 at all (CentOS 7's systemd
// 219): cpu and cpuacct mounted together.
const (
	legacyMountinfo = `18 61 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw
24 18 0:20 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:7 - tmpfs tmpfs ro,mode=755
25 24 0:21 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
28 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpuacct,cpu
29 24 0:25 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpuset
30 24 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
31 24 0:27 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,devices
32 24 0:28 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,pids
33 24 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,net_prio,net_cls
61 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/centos-root rw,attr2,inode64,noquota
`
	legacyCgroup = `11:net_prio,net_cls:/
10:pids:/user.slice
9:devices:/user.slice
8:memory:/
7:cpuset:/
4:cpuacct,cpu:/
1:name=systemd:/user.slice/user-0.slice/session-1.scope
`
)

// unified is a systemd host on cgroup v2 alone (Debian 12): most people's
// machines.
const (
	unifiedMountinfo = `22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw
28 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
29 22 0:6 / /sys/kernel/security rw,nosuid,nodev,noexec,relatime shared:8 - securityfs securityfs rw
31 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	unifiedCgroup = "0::/user.slice/user-0.slice/session-3.scope\n"
)

// systemdHybrid is a systemd host in hybrid mode (Ubuntu 20.04): the
// controllers on cgroup v1, name=systemd too, cgroup2 at unified.
const (
	systemdHybridMountinfo = `25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
31 25 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
32 25 0:29 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
33 25 0:30 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,devices
34 25 0:31 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,cpuset
35 25 0:32 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,freezer
`
	systemdHybridCgroup = `12:cpuset:/
11:freezer:/
10:devices:/user.slice
9:pids:/user.slice/user-0.slice/session-1.scope
8:memory:/user.slice/user-0.slice/session-1.scope
5:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-0.slice/session-1.scope
0::/user.slice/user-0.slice/session-1.scope
`
)

// hybridOnV2 is a hybrid systemd host booted with cgroup_no_v1=all: only
// name=systemd on cgroup v1, every controller on cgroup2.
const (
	hybridOnV2Mountinfo = `25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
`
	hybridOnV2Cgroup = `1:name=systemd:/user.slice/user-0.slice/session-1.scope
0::/user.slice/user-0.slice/session-1.scope
`
)

// lookPathMissing finds every tool but missing.
func lookPathMissing(missing ...string) func(string) (string, error) {
	return func(name string) (string, error) {
		if slices.Contains(missing, name) {
			return "", errors.New("not found")
		}
		return "/usr/bin/" + filepath.Base(name), nil
	}
}

// goodHost is this host with everything Up needs.
func goodHost() hostFacts {
	in := Inputs{BinDir: "_output/bin", PackageDir: "_output/package", ImageCache: "_output/cluster-image"}
	return hostFacts{
		EUID: 0, Mountinfo: thisHostMountinfo, ProcCgroup: thisHostCgroup,
		PID1Comm: "process_api", LookPath: lookPathMissing(),
		Tools:    append(slices.Clone(machineTools), upTools(in, true)...),
		StateDir: "/var/lib/critlet-cluster", Free: 60 << 30,
		WantDeb: true, PackageDir: in.PackageDir, Debs: []string{"_output/package/kubelet-critlet_1.37.2_amd64.deb"},
	}
}

func TestCheckHost(t *testing.T) {
	for _, c := range []struct {
		name string
		host func(*hostFacts)
		want []string // each problem's What contains one, in order
	}{
		{"this host", func(*hostFacts) {}, nil},
		{"cgroup v1 without cgroup2", func(f *hostFacts) { f.Mountinfo, f.ProcCgroup = legacyMountinfo, legacyCgroup }, nil},
		{"PID 1 an init other than systemd", func(f *hostFacts) { f.PID1Comm, f.PID1Exe = "tini", "/usr/bin/tini" }, nil},
		{"free space just enough", func(f *hostFacts) { f.Free = minFree }, nil},
		{"Create: no package wanted", func(f *hostFacts) { f.WantDeb, f.Debs = false, nil }, nil},

		{"not root", func(f *hostFacts) { f.EUID = 1000 }, []string{"running as uid 1000, not root"}},
		{"cgroup v2 only", func(f *hostFacts) { f.Mountinfo, f.ProcCgroup = unifiedMountinfo, unifiedCgroup },
			[]string{"cgroup v2 only (the unified hierarchy: cgroup2 at /sys/fs/cgroup, no cgroup v1 hierarchy)"}},
		{"hybrid, controllers on cgroup2", func(f *hostFacts) { f.Mountinfo, f.ProcCgroup = hybridOnV2Mountinfo, hybridOnV2Cgroup },
			[]string{"cgroup controllers cpu, cpuacct, cpuset, memory, pids, devices are not cgroup v1 hierarchies here (on cgroup2 at /sys/fs/cgroup/unified (a hybrid host), or not mounted)"}},
		{"cgroup v1 without devices", func(f *hostFacts) { f.Mountinfo, f.ProcCgroup = hybridMountinfo, hybridCgroup },
			[]string{"cgroup controllers devices are not cgroup v1 hierarchies"}},
		{"cgroup v1 without name=systemd", func(f *hostFacts) {
			f.Mountinfo = strings.ReplaceAll(legacyMountinfo, "name=systemd", "name=other")
		}, []string{"cgroup controllers name=systemd are not cgroup v1 hierarchies here (not mounted)"}},
		{"no cgroup mounted", func(f *hostFacts) { f.Mountinfo = "22 28 0:21 / /sys rw - sysfs sysfs rw\n" },
			[]string{"no cgroup hierarchy is mounted"}},
		{"a hierarchy this process is not in", func(f *hostFacts) { f.ProcCgroup = strings.ReplaceAll(thisHostCgroup, "5:devices:/\n", "") },
			[]string{`this process's cgroups: cgroup hierarchy /sys/fs/cgroup/devices ("devices") is not in /proc/self/cgroup`}},

		{"PID 1 systemd", func(f *hostFacts) { f.PID1Comm, f.PID1Exe = "systemd", "/usr/lib/systemd/systemd" },
			[]string{`PID 1 is systemd (/proc/1/comm "systemd", /proc/1/exe /usr/lib/systemd/systemd)`}},
		{"PID 1 systemd, its exe unreadable", func(f *hostFacts) { f.PID1Comm, f.PID1Exe = "systemd", "" },
			[]string{`PID 1 is systemd (/proc/1/comm "systemd", /proc/1/exe unreadable)`}},
		{"PID 1 systemd by its exe", func(f *hostFacts) { f.PID1Comm, f.PID1Exe = "init", "/lib/systemd/systemd" },
			[]string{`PID 1 is systemd (/proc/1/comm "init"`}},
		{"a systemd host in hybrid mode: cgroups fine, PID 1 not", func(f *hostFacts) {
			f.Mountinfo, f.ProcCgroup, f.PID1Comm = systemdHybridMountinfo, systemdHybridCgroup, "systemd"
		}, []string{"PID 1 is systemd"}},

		{"systemd-nspawn missing", func(f *hostFacts) { f.LookPath = lookPathMissing("systemd-nspawn") },
			[]string{"systemd-nspawn is not on PATH"}},
		{"kubeadm not built", func(f *hostFacts) { f.LookPath = lookPathMissing("_output/bin/kubeadm") },
			[]string{"_output/bin/kubeadm is missing or not executable"}},
		{"no critlet package", func(f *hostFacts) { f.Debs = nil },
			[]string{"no kubelet-critlet .deb for"}},
		{"two critlet packages", func(f *hostFacts) { f.Debs = append(f.Debs, "_output/package/kubelet-critlet_1.37.1_amd64.deb") },
			[]string{"2 kubelet-critlet .debs for"}},
		{"too little free space", func(f *hostFacts) { f.Free = minFree - 1 },
			[]string{"4.9 GiB free on the file system of the state directory /var/lib/critlet-cluster"}},

		{"everything at once", func(f *hostFacts) {
			f.EUID, f.Mountinfo, f.ProcCgroup, f.PID1Comm, f.Free = 1000, unifiedMountinfo, unifiedCgroup, "systemd", 1<<30
			f.LookPath = lookPathMissing("systemd-nspawn", "mmdebstrap")
		}, []string{"not root", "cgroup v2 only", "PID 1 is systemd", "systemd-nspawn is not on PATH", "mmdebstrap is not on PATH", "1.0 GiB free"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := goodHost()
			c.host(&f)
			ps := checkHost(f)
			var whats []string
			for _, p := range ps {
				whats = append(whats, p.What)
				if p.Remedy == "" {
					t.Errorf("no remedy for %q", p.What)
				}
			}
			ok := len(ps) == len(c.want)
			for i := 0; ok && i < len(ps); i++ {
				ok = strings.Contains(ps[i].What, c.want[i])
			}
			if !ok {
				t.Errorf("problems\n  %s\nwant, in order, ones saying\n  %s", strings.Join(whats, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// Up asks for mmdebstrap only when the machine image is to be built, and
// for what make builds in the inputs' directories.
func TestPreflightAsksForWhatUpRuns(t *testing.T) {
	in := Inputs{BinDir: "/b", PackageDir: t.TempDir(), ImageCache: t.TempDir()}
	asked := func() []string {
		var names []string
		old := readHost
		readHost = func(string) (hostFacts, error) {
			f := goodHost()
			f.LookPath = func(n string) (string, error) { names = append(names, n); return n, nil }
			return f, nil
		}
		defer func() { readHost = old }()
		_ = (&Cluster{}).preflight(&in)
		return names
	}
	got := asked()
	for _, want := range []string{"systemd-nspawn", "nsenter", "mmdebstrap", "/bin/busybox", "/b/kubeadm", "/b/kube-apiserver", "/b/pause"} {
		if !slices.Contains(got, want) {
			t.Errorf("preflight did not look for %s: %v", want, got)
		}
	}
	if err := os.WriteFile(imagePath(in.ImageCache), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := asked(); slices.Contains(got, "mmdebstrap") {
		t.Errorf("preflight looked for mmdebstrap with the image built: %v", got)
	}
}

// Up on a host it cannot run on lists every problem and makes nothing:
// nothing in the state directory (not even its marker), no host claim,
// no image cache.
func TestUpRefusesBeforeMakingAnything(t *testing.T) {
	testHost(t)
	old := readHost
	readHost = func(dir string) (hostFacts, error) {
		return hostFacts{EUID: 0, Mountinfo: unifiedMountinfo, ProcCgroup: unifiedCgroup, PID1Comm: "systemd",
			LookPath: lookPathMissing("systemd-nspawn"), StateDir: dir, Free: 1 << 30}, nil
	}
	t.Cleanup(func() { readHost = old })
	dir := t.TempDir()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	in := Inputs{Repo: base, BinDir: filepath.Join(base, "bin"), PackageDir: filepath.Join(base, "package"), ImageCache: filepath.Join(base, "image")}
	_, err = c.Up(context.Background(), in, []Node{{Name: "n1", Critlet: true}}, func(string) {})
	var refused *HostError
	if !errors.As(err, &refused) {
		t.Fatalf("Up: %v, want the host refused", err)
	}
	t.Log(err)
	for _, want := range []string{"cgroup v2 only", "PID 1 is systemd", "systemd-nspawn is not on PATH", "no kubelet-critlet .deb", "1.0 GiB free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up's refusal does not say %q:\n%v", want, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Up refused the host but wrote %v in the state directory", entries)
	}
	for _, p := range []string{hostFiles.OwnerFile, hostFiles.LockFile, in.ImageCache, filepath.Join(dir, stateguard.ClusterMarkerFile)} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("Up refused the host but made %s", p)
		}
	}
}

func TestFreeBytesOfADirectoryNotMadeYet(t *testing.T) {
	dir := t.TempDir()
	want, err := freeBytes(dir)
	if err != nil || want == 0 {
		t.Fatalf("free space of %s: %d, %v", dir, want, err)
	}
	got, err := freeBytes(filepath.Join(dir, "state", "cluster"))
	if err != nil || got == 0 {
		t.Fatalf("free space below %s: %d, %v", dir, got, err)
	}
}

// readHost reads this host as checkHost takes it: PID 1's name without
// /proc's newline (systemd's "systemd\n" would not be recognized).
func TestReadHost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f, err := readHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.PID1Comm == "" || f.PID1Comm != strings.TrimSpace(f.PID1Comm) {
		t.Errorf("PID 1's comm %q", f.PID1Comm)
	}
	if !strings.Contains(f.Mountinfo, " - ") || f.ProcCgroup == "" || f.LookPath == nil || f.StateDir != dir || f.Free == 0 || f.EUID != os.Geteuid() {
		t.Errorf("host facts incomplete: %+v", f)
	}
}
