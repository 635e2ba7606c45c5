package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// The cluster runs as root and acts on its state directory's record (PIDs
// it kills, cgroups and directories it removes), so it holds the directory
// to the local node's rules (stateguard): used only when nobody but root
// can change it, claimed with the marker before anything is made in it, and
// a non-empty directory without the marker is refused. The machine
// cgroups have fixed names: one cluster on the host at a time owns them,
// named by the owner file, taken under the host lock.

// hostFiles are the host's cluster lock and owner claim, apart from the
// local node's: the two hold different resources. Tests use their own.
var hostFiles = stateguard.Host{LockFile: "/run/critlet-cluster.lock", OwnerFile: "/run/critlet-cluster.owner", LockWait: 10 * time.Minute}

// hostResources names what the claim covers, for messages.
const hostResources = "the cgroups critlet-machine-* in every hierarchy"

var logger = klog.Background()

// openStateDir checks the state directory dir and returns it absolute and
// resolved. A relative dir is taken from the working directory.
func openStateDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := stateguard.Check(abs); err != nil {
		return "", err
	}
	// A local node's directory carries the shared marker alone.
	if _, err := os.Lstat(filepath.Join(abs, stateguard.MarkerFile)); err == nil && !stateguard.IsCluster(abs) {
		return "", fmt.Errorf("state directory %s is a local node's (it has %s and no %s), not a cluster's: local-node down --state %s removes that node", abs, stateguard.MarkerFile, stateguard.ClusterMarkerFile, abs)
	}
	real, err := stateguard.Trust(abs)
	if err != nil {
		return "", fmt.Errorf("%w (critlet-cluster's: --state DIR, or CLUSTER_STATE=DIR with make)", err)
	}
	return real, nil
}

// readRecord reads and checks the record in the state directory dir; a
// missing one is an empty record.
func readRecord(dir string) (Record, error) {
	var r Record
	path := filepath.Join(dir, recordFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, nil
	case err != nil:
		return r, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkRecord(r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// checkRecord validates r against the host's cgroup hierarchies.
func checkRecord(r Record) error {
	var mounts []string
	for _, m := range r.Machines {
		if m != nil && len(m.Cgroups) > 0 {
			var err error
			if mounts, err = cgroupMountPoints(); err != nil {
				return err
			}
			break
		}
	}
	return validateRecord(r, mounts)
}

// marked reports whether the state directory carries the cluster's
// marker: a directory without it holds nothing of a cluster's (Open
// refused it otherwise).
func (c *Cluster) marked() bool { return stateguard.IsCluster(c.dir) }

// claim marks the state directory as a cluster's, recording in it what
// stateguard records, and the host's machine cgroups as this cluster's:
// before Up makes anything.
func (c *Cluster) claim() error {
	if c.claimed {
		return nil
	}
	if !c.rec.empty() {
		return fmt.Errorf("%s already records a cluster: remove it first (critlet-cluster down --state %s)", c.dir, c.dir)
	}
	err := hostFiles.WithLock(logger, func() error {
		if err := c.checkOwner(); err != nil {
			return err
		}
		// Again: the directory may have changed since Open.
		if err := stateguard.Check(c.dir); err != nil {
			return err
		}
		if err := stateguard.Claim(c.dir); err != nil {
			return err
		}
		if err := c.markAsCluster(); err != nil {
			return err
		}
		return hostFiles.Claim(c.dir)
	})
	c.claimed = err == nil
	return err
}

// markAsCluster writes the cluster's marker beside the shared one, through
// the checked, opened directory.
func (c *Cluster) markAsCluster() error {
	d, err := stateguard.Open(c.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.WriteFile(stateguard.ClusterMarkerFile, []byte("critlet-cluster state directory (critlet-cluster up and down)\n"), 0o644); err != nil {
		return fmt.Errorf("marking the state directory as a cluster's: %w", err)
	}
	return nil
}

// checkOwner refuses while another cluster owns the machine cgroups.
func (c *Cluster) checkOwner() error {
	if owner := hostFiles.Owner(); owner != "" && !stateguard.SameDir(owner, c.dir) {
		if stateguard.IsCluster(owner) {
			return fmt.Errorf("the cluster under %s owns this host's machine cgroups (%s names it), and there is one cluster at a time: remove it first (critlet-cluster down --state %s)", owner, hostFiles.OwnerFile, owner)
		}
	}
	// An owner gone from its directory: released if it left nothing.
	return hostFiles.CheckOwner(logger, c.dir, hostResources, machineCgroupsLeft)
}

// releaseClaim gives the claim up when this cluster holds it and nothing
// is left on the host; otherwise it stays, so that no other cluster starts
// beside what is left.
func (c *Cluster) releaseClaim() error {
	if owner := hostFiles.Owner(); owner == "" || !stateguard.SameDir(owner, c.dir) || !c.rec.empty() {
		return nil
	}
	return hostFiles.Release()
}

// machineCgroupsLeft lists machine cgroups below this process's cgroups.
func machineCgroupsLeft() []string {
	hs, err := hierarchies()
	if err != nil {
		return []string{"cgroup hierarchies unknown: " + err.Error()}
	}
	var left []string
	for _, h := range hs {
		found, _ := filepath.Glob(filepath.Join(h.mount, h.own, "critlet-machine-*"))
		left = append(left, found...)
	}
	return left
}

func (r Record) empty() bool { return r.Hub == nil && len(r.Machines) == 0 && len(r.HostDirs) == 0 }
