package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/stateguard"
	sgt "github.com/critlet/critlet/internal/localnode/stateguard/stateguardtest"
)

// testHost gives the test a host lock and owner file of its own.
func testHost(t *testing.T) {
	t.Helper()
	d := t.TempDir()
	old := hostFiles
	hostFiles = stateguard.Host{LockFile: filepath.Join(d, "lock"), OwnerFile: filepath.Join(d, "owner"), LockWait: time.Second}
	t.Cleanup(func() { hostFiles = old })
}

// testHierarchies stands n temporary directories in for the host's cgroup
// hierarchies.
func testHierarchies(t *testing.T, n int) []string {
	t.Helper()
	var hs []string
	for i := range n {
		hs = append(hs, filepath.Join(t.TempDir(), fmt.Sprint("h", i)))
		if err := os.Mkdir(hs[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := cgroupMountPoints
	cgroupMountPoints = func() ([]string, error) { return hs, nil }
	t.Cleanup(func() { cgroupMountPoints = old })
	return hs
}

// claimed opens dir and claims it, as Up does first.
func claimed(t *testing.T, dir string) *Cluster {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.claim(); err != nil {
		t.Fatal(err)
	}
	return c
}

func writeRecord(t *testing.T, dir, record string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte(record), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
}

// A record naming a machine ../../victim and a host file made Down remove
// a directory and a file outside the state directory. Down refuses it,
// naming both, and removes nothing.
func TestDownRefusesAForgedRecord(t *testing.T) {
	testHost(t)
	base := t.TempDir()
	dir := filepath.Join(base, "state")
	claimed(t, dir)
	victimDir := filepath.Join(base, "victim") // dir/machines/../../victim
	if err := os.Mkdir(victimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victimDir, "data"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	victimFile := sgt.Victim(t)
	writeRecord(t, dir, fmt.Sprintf(`{"machines": [{"name": "../../victim", "index": 1, "addr": "10.250.0.11", "nic": {}, "cgroups": [], "boots": 0}], "host_dirs": [%q]}`, victimFile))

	c, err := Open(dir)
	if err == nil {
		err = c.Down(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), `"../../victim"`) || !strings.Contains(err.Error(), victimFile) {
		t.Errorf("a forged record was acted on: %v", err)
	}
	mustExist(t, filepath.Join(victimDir, "data"), victimFile)

	// Down checks the record it acts on itself too: an empty directory
	// would go by rmdir.
	emptyDir := t.TempDir()
	c = &Cluster{dir: dir, rec: Record{HostDirs: []string{emptyDir}}}
	if err := c.Down(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing done") || !strings.Contains(err.Error(), emptyDir) {
		t.Errorf("Down acted on a record naming %s: %v", emptyDir, err)
	}
	mustExist(t, emptyDir)
}

// victimProcess is a process that a record forged by another user names
// as the cluster's: it must survive.
func victimProcess(t *testing.T) process.Ref {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, err := process.Find("hub", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateRecord(t *testing.T) {
	hs := []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"}
	ref := func(name string, pid int) process.Ref { return process.Ref{Name: name, PID: pid, Started: 42} }
	good := func() Record {
		boot := ref("n2", 1235)
		return Record{
			Hub: &process.Ref{Name: "hub", PID: 1000, Started: 7, LogFile: "/s/hub.log"},
			Machines: []*Machine{
				{Name: "n1", Index: 1, Addr: "10.250.0.11", NIC: ref("n1 nic", 1234),
					Cgroups:     []string{"/sys/fs/cgroup/memory/a/critlet-machine-n1", "/sys/fs/cgroup/unified/critlet-machine-n1"},
					CgroupsMade: []string{"/sys/fs/cgroup/unified/critlet-machine-n1"}},
				{Name: "n2", Index: 2, Addr: "10.250.0.12", Boot: &boot, Boots: 3},
			},
			HostDirs: []string{"/run/systemd/nspawn", "/run/systemd/nspawn/locks"},
		}
	}
	if err := validateRecord(good(), hs); err != nil {
		t.Fatalf("the record Up writes is refused: %v", err)
	}
	for name, c := range map[string]struct {
		change func(*Record)
		want   string
	}{
		"a name leading out":      {func(r *Record) { r.Machines[0].Name = "../../victim" }, `"../../victim"`},
		"a name with a slash":     {func(r *Record) { r.Machines[0].Name = "n1/x" }, `"n1/x"`},
		"a dot-dot name":          {func(r *Record) { r.Machines[0].Name = ".." }, `".."`},
		"an empty name":           {func(r *Record) { r.Machines[0].Name = "" }, `""`},
		"another name":            {func(r *Record) { r.Machines[0].Name = "web" }, `"web"`},
		"a name twice":            {func(r *Record) { r.Machines[1].Name = "n1"; r.Machines[1].Boot.Name = "n1" }, "recorded twice"},
		"no machine":              {func(r *Record) { r.Machines[1] = nil }, "machine 2: empty"},
		"an index twice":          {func(r *Record) { r.Machines[1].Index = 1; r.Machines[1].Addr = "10.250.0.11" }, "index 1"},
		"another address":         {func(r *Record) { r.Machines[0].Addr = "192.168.1.1" }, `"192.168.1.1"`},
		"init's PID":              {func(r *Record) { r.Hub.PID = 1 }, "PID 1 "},
		"every process":           {func(r *Record) { r.Machines[0].NIC.PID = -1 }, "PID -1 "},
		"a process of other name": {func(r *Record) { r.Machines[1].Boot.Name = "sshd" }, `"sshd"`},
		"a cgroup of another name": {func(r *Record) {
			r.Machines[0].Cgroups[0] = "/sys/fs/cgroup/memory/system.slice"
		}, `"/sys/fs/cgroup/memory/system.slice"`},
		"a cgroup leading out": {func(r *Record) {
			r.Machines[0].Cgroups[0] = "/sys/fs/cgroup/memory/../../../etc/critlet-machine-n1"
		}, "/etc/critlet-machine-n1"},
		"a cgroup outside the hierarchies": {func(r *Record) { r.Machines[0].Cgroups[0] = "/tmp/critlet-machine-n1" }, `"/tmp/critlet-machine-n1"`},
		"a hierarchy's root":               {func(r *Record) { r.Machines[0].Cgroups[0] = "/sys/fs/cgroup/memory" }, `"/sys/fs/cgroup/memory"`},
		"two in one hierarchy": {func(r *Record) {
			r.Machines[0].Cgroups[0] = "/sys/fs/cgroup/unified/x/critlet-machine-n1"
		}, "two cgroups in hierarchy /sys/fs/cgroup/unified"},
		"a cgroup made not the machine's": {func(r *Record) {
			r.Machines[0].CgroupsMade = []string{"/sys/fs/cgroup/memory/critlet-machine-n2"}
		}, `"/sys/fs/cgroup/memory/critlet-machine-n2"`},
		"a host file":     {func(r *Record) { r.HostDirs = append(r.HostDirs, "/etc/passwd") }, `"/etc/passwd"`},
		"a run directory": {func(r *Record) { r.HostDirs = []string{"/run"} }, `"/run"`},
	} {
		t.Run(name, func(t *testing.T) {
			r := good()
			c.change(&r)
			if err := validateRecord(r, hs); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to name %s", err, c.want)
			}
		})
	}
}

// The state directory is one only root can change, as the local node's.
func TestStateDirRefused(t *testing.T) {
	testHost(t)
	base := t.TempDir()
	open := sgt.Mkdir(t, filepath.Join(base, "open"), 0o777, 0)
	nobodys := sgt.Mkdir(t, filepath.Join(base, "nobodys"), 0o755, sgt.Nobody)
	below := filepath.Join(sgt.Mkdir(t, filepath.Join(base, "parent"), 0o777, 0), "state")
	unmarked := sgt.Mkdir(t, filepath.Join(base, "unmarked"), 0o755, 0)
	if err := os.WriteFile(filepath.Join(unmarked, "notes"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		open:     "can be written by its group or by others",
		nobodys:  "owned by uid 65534",
		below:    "can be written by its group or by others",
		unmarked: "no local node created it",
	} {
		_, err := Open(dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("state directory %s: error %v, want %q", dir, err, want)
		}
		if _, err := os.Lstat(filepath.Join(dir, stateguard.MarkerFile)); err == nil {
			t.Errorf("%s was claimed", dir)
		}
	}
	mustExist(t, filepath.Join(unmarked, "notes"))

	// A record another user wrote, of the form the cluster writes, naming
	// their victim as the hub, is not acted on.
	victim := victimProcess(t)
	for _, dir := range []string{open, nobodys} {
		record := fmt.Sprintf(`{"hub": {"Name": "hub", "PID": %d, "Started": %d}, "machines": []}`, victim.PID, victim.Started)
		for name, data := range map[string]string{stateguard.MarkerFile: "", stateguard.ClusterMarkerFile: "", recordFile: record} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if c, err := Open(dir); err == nil {
			t.Errorf("%s opened", dir)
			_ = c.Down(context.Background())
		}
	}
	if !victim.Alive() {
		t.Error("a record in a directory another user controls had a process killed")
	}
}

// The machine cgroups' names are fixed: one cluster at a time claims them,
// and a second is refused before it makes anything.
func TestOneClusterAtATime(t *testing.T) {
	testHost(t)
	base := t.TempDir()
	first, second := filepath.Join(base, "first"), filepath.Join(base, "second")
	a := claimed(t, first)
	b, err := Open(second)
	if err != nil {
		t.Fatal(err)
	}
	want := "critlet-cluster down --state " + first
	if err := b.claim(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a second cluster claimed the host: %v, want %q", err, want)
	}
	if _, err := os.Lstat(second); err == nil {
		t.Errorf("the refused cluster made %s", second)
	}
	if err := a.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.claim(); err != nil {
		t.Errorf("the host is not free once the first is down: %v", err)
	}
}

func TestMakeCgroupRefusesAnExistingOne(t *testing.T) {
	cg := filepath.Join(t.TempDir(), "critlet-machine-n1")
	if err := makeCgroup(cg); err != nil {
		t.Fatal(err)
	}
	if err := makeCgroup(cg); err == nil {
		t.Error("a cgroup that exists was taken as made")
	}
}

// A machine cgroup found existing (another cluster's) is refused at boot
// and left by Down; those the cluster made are kept across boots and
// removed by Down.
func TestMachineCgroupsOnlyOurs(t *testing.T) {
	testHost(t)
	hs := testHierarchies(t, 2)
	c := claimed(t, filepath.Join(t.TempDir(), "state"))
	mine, others := filepath.Join(hs[0], "critlet-machine-n1"), filepath.Join(hs[1], "critlet-machine-n1")
	if err := os.Mkdir(others, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), Cgroups: []string{mine, others}}
	c.rec.Machines = []*Machine{m}
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	if err := c.makeCgroups(m); err == nil || !strings.Contains(err.Error(), others) {
		t.Errorf("booting in %s, which the cluster did not make: %v", others, err)
	}
	reopened, err := Open(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := reopened.Machines()[0].CgroupsMade; !slices.Equal(got, []string{mine}) {
		t.Errorf("cgroups recorded as made: %v, want %v", got, []string{mine})
	}
	if err := reopened.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustExist(t, others)
	if _, err := os.Lstat(mine); err == nil {
		t.Errorf("%s, made by the cluster, is left", mine)
	}

	// A reboot keeps the cgroups made at the first boot.
	if err := os.Remove(others); err != nil {
		t.Fatal(err)
	}
	c = claimed(t, filepath.Join(t.TempDir(), "state"))
	m = &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), Cgroups: []string{mine, others}}
	c.rec.Machines = []*Machine{m}
	for boot := 1; boot <= 2; boot++ {
		if err := c.makeCgroups(m); err != nil {
			t.Fatalf("boot %d: %v", boot, err)
		}
	}
	if err := c.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, cg := range []string{mine, others} {
		if _, err := os.Lstat(cg); err == nil {
			t.Errorf("%s, made by the cluster, is left", cg)
		}
	}
}
