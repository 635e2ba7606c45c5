package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/atomicfile"
	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// Cluster is the machines recorded in a state directory.
type Cluster struct {
	dir         string // absolute and resolved, checked (openStateDir)
	rec         Record
	pkgs        Packages // what Up installed from
	claimed     bool     // by this process (claim)
	preflighted bool     // the host passed (preflight)
}

// LastPackages are the packages Up built or found.
func (c *Cluster) LastPackages() Packages { return c.pkgs }

const recordFile = "record.json"

// nspawnRunDirs are what systemd-nspawn makes on the host (its locks and
// mount propagation directories), parents first.
var nspawnRunDirs = []string{"/run/systemd", "/run/systemd/nspawn", "/run/systemd/nspawn/locks", "/run/systemd/nspawn/propagate"}

// Open reads the cluster recorded in dir, or an empty one. It refuses a
// directory anyone but root could change, a non-empty one no cluster (or
// local node) marked, and a record with an entry this package does not
// write; then nothing is touched.
func Open(dir string) (*Cluster, error) {
	real, err := openStateDir(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: real}
	if c.rec, err = readRecord(real); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the cluster's state directory.
func (c *Cluster) Dir() string { return c.dir }

// Machines are the recorded machines, in order.
func (c *Cluster) Machines() []*Machine { return c.rec.Machines }

// Record is a copy of what the cluster has made on the host.
func (c *Cluster) Record() Record { return c.rec }

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c.rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(c.dir, recordFile), append(b, '\n'), 0o644)
}

func (c *Cluster) machine(name string) (*Machine, error) {
	for _, m := range c.rec.Machines {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no machine %s in %s", name, c.dir)
}

// Create makes machines named names from the image archive, each booted
// and on the hub's bridge, pauseRef their containerd's sandbox image. A
// host it cannot run on is refused first (preflight); then each thing is
// recorded before it is made.
func (c *Cluster) Create(ctx context.Context, image, pauseRef string, names []string) error {
	for _, name := range names {
		if err := checkMachineName(name); err != nil {
			return err
		}
	}
	if !c.rec.empty() {
		return fmt.Errorf("%s already records a cluster: remove it first (critlet-cluster down --state %s)", c.dir, c.dir)
	}
	if err := c.preflight(nil); err != nil {
		return err
	}
	if err := c.claim(); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, d := range nspawnRunDirs {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			c.rec.HostDirs = append(c.rec.HostDirs, d)
		}
	}
	if err := c.save(); err != nil {
		return err
	}
	hub, err := holdNetns(ctx, "hub", filepath.Join(c.dir, "hub.log"))
	if hub.PID > 0 {
		c.rec.Hub = &hub
		if serr := c.save(); serr != nil {
			return serr
		}
	}
	if err != nil {
		return fmt.Errorf("the hub's namespace: %w", err)
	}
	if err := setUpHub(ctx, hub); err != nil {
		return err
	}
	for i, name := range names {
		c.rec.Machines = append(c.rec.Machines, &Machine{Name: name, Index: i + 1, Addr: MachineAddr(i + 1), Cgroups: machineCgroups(hs, name)})
	}
	if err := c.save(); err != nil {
		return err
	}
	for _, m := range c.rec.Machines {
		if err := c.createMachine(ctx, m, image, pauseRef); err != nil {
			return fmt.Errorf("machine %s: %w", m.Name, err)
		}
	}
	return nil
}

func (c *Cluster) createMachine(ctx context.Context, m *Machine, image, pauseRef string) error {
	root := c.RootDir(m.Name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "tar", "-C", root, "--numeric-owner", "-xpf", image).CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking %s: %w: %s", image, err, out)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	files := append(machineFiles(m, c.rec.Machines, pauseRef), machineFile{"/etc/machine-id", 0o444, hex.EncodeToString(id) + "\n"})
	if err := writeMachineFiles(root, files); err != nil {
		return err
	}
	nic, err := holdNetns(ctx, m.Name+" nic", filepath.Join(c.machineDir(m.Name), "nic.log"))
	if nic.PID > 0 {
		m.NIC = nic
		if serr := c.save(); serr != nil {
			return serr
		}
	}
	if err != nil {
		return err
	}
	if err := plugIn(ctx, *c.rec.Hub, m); err != nil {
		return err
	}
	return c.Boot(ctx, m.Name)
}

// Down stops every machine and removes what the record lists: the
// machines' processes, cgroups, namespaces (with their holders) and
// directories, and the directories nspawn made under /run. What it could
// not remove is in the error, and stays recorded. A record with an entry
// this package does not write makes it do nothing.
func (c *Cluster) Down(ctx context.Context) error {
	if err := checkRecord(c.rec); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(c.dir, recordFile), err)
	}
	if !c.marked() {
		if c.rec.empty() {
			return nil // never claimed: nothing made
		}
		return fmt.Errorf("%s records a cluster but has no %s: nothing done", c.dir, stateguard.ClusterMarkerFile)
	}
	return hostFiles.WithLock(logger, func() error { return c.down(ctx) })
}

func (c *Cluster) down(ctx context.Context) error {
	// Opened once, checked: machines' directories are removed in it,
	// never through a link.
	root, err := stateguard.Open(c.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var errs []error
	for _, m := range c.rec.Machines {
		if m.Boot != nil && m.Boot.Alive() {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := c.PowerOff(pctx, m.Name)
			cancel()
			if err != nil {
				errs = append(errs, err)
				if err := c.halt(m); err != nil {
					errs = append(errs, fmt.Errorf("machine %s: %w", m.Name, err))
				}
			}
		}
	}
	var kept []*Machine
	for _, m := range c.rec.Machines {
		if err := c.removeMachine(root, m); err != nil {
			errs = append(errs, fmt.Errorf("machine %s: %w", m.Name, err))
			kept = append(kept, m)
		}
	}
	c.rec.Machines = kept
	if c.rec.Hub != nil {
		if err := c.rec.Hub.Stop(time.Second); err != nil {
			errs = append(errs, fmt.Errorf("the hub's namespace: %w", err))
		} else {
			c.rec.Hub = nil
		}
	}
	if len(kept) == 0 {
		dirs := append([]string(nil), c.rec.HostDirs...)
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		var left []string
		for _, d := range dirs {
			// Only an empty directory: something else may use it by now.
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("directory %s that systemd-nspawn made: %w", d, err))
				left = append(left, d)
			}
		}
		c.rec.HostDirs = left
	}
	if err := c.save(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// Claim's manifest goes; the marker stays, as a local node's does.
		errs = append(errs, root.RemoveAll(stateguard.ManifestFile), c.releaseClaim())
	}
	return errors.Join(errs...)
}

// removeMachine removes a stopped machine's processes, the cgroups it
// made, its namespace and files (through root, the state directory).
func (c *Cluster) removeMachine(root *stateguard.Dir, m *Machine) error {
	if m.Boot != nil && m.Boot.Alive() {
		if err := c.halt(m); err != nil {
			return err
		}
	}
	for _, cg := range m.CgroupsMade {
		if pids := cgroupProcs(cg); len(pids) > 0 {
			return fmt.Errorf("processes %s are still in cgroup %s", strings.Join(pids, " "), cg)
		}
		if err := removeCgroup(cg); err != nil {
			return err
		}
	}
	if err := m.NIC.Stop(time.Second); err != nil {
		return err
	}
	if err := checkNoMounts(c.machineDir(m.Name)); err != nil {
		return err
	}
	return root.RemoveAll(filepath.Join("machines", m.Name))
}

// hostMountInfo is where the host's mounts are read; tests use their own.
var hostMountInfo = "/proc/self/mountinfo"

// checkNoMounts fails if something is mounted at or below dir on the host.
// mountinfo names mount points absolute, resolved and escaped (\040 for a
// space): dir is made alike, the entries unescaped (isolation.MountsAt).
func checkNoMounts(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	mounts, err := isolation.MountsAt(hostMountInfo, abs)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("%s is mounted on the host: not removing %s", strings.Join(mounts, ", "), dir)
	}
	return nil
}
