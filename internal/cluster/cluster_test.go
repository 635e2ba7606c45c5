package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	utilsysctl "k8s.io/component-helpers/node/util/sysctl"

	"github.com/critlet/critlet/internal/localnode/process"
)

// This host's kind: cgroup v1 with cpu and cpuacct apart, the memory
// hierarchy at a sub-path, name=systemd, and cgroup2 beside them.
const hybridCgroup = `9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`

const hybridMountinfo = `25 24 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
28 25 0:25 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
29 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
30 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
31 25 0:28 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
32 25 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 1 0:30 / /proc rw - proc proc rw
`

func TestParseHierarchies(t *testing.T) {
	hs, err := parseHierarchies(hybridCgroup, hybridMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	got := machineCgroups(hs, "n1")
	want := []string{
		"/sys/fs/cgroup/cpu/critlet-machine-n1", "/sys/fs/cgroup/cpuacct/critlet-machine-n1",
		"/sys/fs/cgroup/cpuset/critlet-machine-n1", "/sys/fs/cgroup/memory/process_api/abc/critlet-machine-n1",
		"/sys/fs/cgroup/pids/critlet-machine-n1", "/sys/fs/cgroup/systemd/critlet-machine-n1",
		"/sys/fs/cgroup/unified/critlet-machine-n1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("machine cgroups\n got %v\nwant %v", got, want)
	}
}

func TestParseHierarchiesRefuses(t *testing.T) {
	for name, c := range map[string]struct{ cgroup, mountinfo, want string }{
		"a mount this process has no line for": {"0::/\n", hybridMountinfo, `cgroup hierarchy /sys/fs/cgroup/cpu ("cpu") is not in /proc/self/cgroup`},
		"no cgroup mounted":                    {hybridCgroup, "40 1 0:30 / /proc rw - proc proc rw\n", "no cgroup hierarchy is mounted"},
		// A namespaced view: this process's cgroup above the mount's root.
		"outside the mount": {"0::/a\n", "32 25 0:29 /b /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "outside the mount"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseHierarchies(c.cgroup, c.mountinfo)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// The machines cover exactly the kernel settings upstream's kubelet sets
// at start, with the values it wants: one missing and the kubelet fails
// on the machine's read-only /proc/sys.
func TestKernelMasksAreTheKubeletsTunables(t *testing.T) {
	want := map[string]string{
		utilsysctl.VMOvercommitMemory: strconv.Itoa(utilsysctl.VMOvercommitMemoryAlways),
		utilsysctl.VMPanicOnOOM:       strconv.Itoa(utilsysctl.VMPanicOnOOMInvokeOOMKiller),
		utilsysctl.KernelPanic:        strconv.Itoa(utilsysctl.KernelPanicRebootTimeout),
		utilsysctl.KernelPanicOnOops:  strconv.Itoa(utilsysctl.KernelPanicOnOopsAlways),
		utilsysctl.RootMaxKeys:        strconv.Itoa(utilsysctl.RootMaxKeysSetting),
		utilsysctl.RootMaxBytes:       strconv.Itoa(utilsysctl.RootMaxBytesSetting),
	}
	if len(kernelMasks) != len(want) {
		t.Errorf("%d masks, upstream's kubelet sets %d settings", len(kernelMasks), len(want))
	}
	for k, v := range want {
		if kernelMasks[k] != v {
			t.Errorf("mask %s = %q, the kubelet wants %q", k, kernelMasks[k], v)
		}
	}
}

func TestMachineFiles(t *testing.T) {
	all := []*Machine{{Name: "n1", Index: 1, Addr: MachineAddr(1)}, {Name: "n2", Index: 2, Addr: MachineAddr(2)}}
	files := machineFiles(all[1], all, "critlet.local/kubeadm/pause:3.10")
	byPath := map[string]machineFile{}
	for _, f := range files {
		if _, dup := byPath[f.path]; dup {
			t.Errorf("%s written twice", f.path)
		}
		byPath[f.path] = f
	}
	for path, want := range map[string]string{
		"/etc/hostname":               "n2\n",
		"/etc/hosts":                  "10.250.0.11 n1\n10.250.0.12 n2\n",
		"/etc/containerd/config.toml": `sandbox_image = "critlet.local/kubeadm/pause:3.10"`,
		"/etc/cni/net.d/10-critlet-machine.conflist":         `"subnet": "10.251.2.0/24"`,
		"/usr/local/lib/critlet-machine/sysctl/kernel/panic": "10\n",
	} {
		if !strings.Contains(byPath[path].data, want) {
			t.Errorf("%s = %q, want it to hold %q", path, byPath[path].data, want)
		}
	}
	root := t.TempDir()
	if err := writeMachineFiles(root, files); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(root, "etc/systemd/system/sysinit.target.wants/critlet-machine-host.service")); err != nil || l != "/etc/systemd/system/critlet-machine-host.service" {
		t.Errorf("the set-up unit is not wanted at boot: %q %v", l, err)
	}
	if err := exec.Command("sh", "-n", filepath.Join(root, "usr/local/lib/critlet-machine/host-setup")).Run(); err != nil {
		t.Errorf("the set-up script does not parse: %v", err)
	}
}

func TestImageKeyFollowsThePackages(t *testing.T) {
	before := imageKey()
	machinePackages = append(machinePackages, "strace")
	t.Cleanup(func() { machinePackages = machinePackages[:len(machinePackages)-1] })
	if imageKey() == before {
		t.Error("another package list keeps the machine image's key: an old image would be reused")
	}
}

// A recorded process whose PID now belongs to another process (another
// start time) is not alive, and Stop leaves that process alone.
func TestProcessWithReusedPIDIsNotKilled(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	real, err := process.Find("sleep", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !real.Alive() {
		t.Fatal("a running process is not alive")
	}
	other := process.Ref{Name: "sleep", PID: real.PID, Started: real.Started + 1}
	if other.Alive() {
		t.Error("a process recorded with another start time is alive")
	}
	if err := other.Stop(0); err != nil {
		t.Fatal(err)
	}
	// A signal takes a moment to act.
	if real.Wait(500 * time.Millisecond) {
		t.Error("Kill of a stale record killed the process now at its PID")
	}
}

func TestOpenAndDownOfAnEmptyCluster(t *testing.T) {
	testHost(t)
	dir := t.TempDir()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Down of a cluster never made wrote %v", entries)
	}
	c2, err := Open(dir)
	if err != nil || len(c2.Machines()) != 0 {
		t.Fatalf("reopened: %v %v", c2.Machines(), err)
	}
	if err := c2.claim(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), recordFile) {
		t.Errorf("a damaged record opened: %v", err)
	}
}

func TestCheckNoMounts(t *testing.T) {
	if err := checkNoMounts("/proc"); err == nil {
		t.Error("/proc is mounted, and checkNoMounts let it be removed")
	}
	if err := checkNoMounts(t.TempDir()); err != nil {
		t.Error(err)
	}
}

// mountinfo names mount points absolute and escaped; the Makefile gives
// the state directory relative (_output/cluster).
func TestCheckNoMountsRelativeAndEscaped(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	mount := func(p string) string { return "36 25 0:40 / " + p + " rw,relatime - tmpfs tmpfs rw\n" }
	if err := os.WriteFile(info, []byte(mount("/proc")+
		mount(filepath.Join(cwd, "_output/cluster/machines/n1/root/mnt"))+
		mount(`/srv/my\040state/machines/n2`)), 0o644); err != nil {
		t.Fatal(err)
	}
	old := hostMountInfo
	hostMountInfo = info
	t.Cleanup(func() { hostMountInfo = old })
	for _, dir := range []string{"_output/cluster/machines/n1", "./_output/cluster/machines/../machines/n1/", "/srv/my state/machines/n2"} {
		if err := checkNoMounts(dir); err == nil {
			t.Errorf("checkNoMounts(%q) found no mount below it", dir)
		}
	}
	for _, dir := range []string{"_output/cluster/machines/n2", "/srv/my state/machines/n1", `/srv/my\040state/machines/n2`} {
		if err := checkNoMounts(dir); err != nil {
			t.Errorf("checkNoMounts(%q): %v", dir, err)
		}
	}
}
