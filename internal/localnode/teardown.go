package localnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// ErrNotANode is Down's answer for a directory no node claimed: it did
// nothing there.
var ErrNotANode = errors.New("not a local node's state directory: nothing done")

// Down stops every component recorded under cfg.StateDir and removes what
// the node created: pod sandboxes and their processes, shims, cgroups, the
// CNI bridge, mounts, host mount points and all state but the logs. It goes
// on after a failed step, so that one stuck piece does not leave the rest
// behind, and reports every failure.
func Down(cfg Config) error {
	return hostFiles.WithLock(cfg.logger(), func() error { return down(cfg) })
}

func down(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	// Only a directory a node has claimed is touched: a mistyped state
	// directory must not lose its contents.
	if err := stateguard.RefuseCluster(cfg.StateDir); err != nil {
		return err
	}
	if err := stateguard.Check(cfg.StateDir); err != nil {
		return err
	}
	real, err := stateguard.Trust(cfg.StateDir)
	if err != nil {
		return err
	}
	n := &Node{cfg: cfg, l: layout{real}}
	if _, err := os.Lstat(n.l.path(stateguard.MarkerFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", cfg.StateDir, ErrNotANode)
	}
	// Opened once, checked: what is removed below is removed in this
	// directory, whatever its path names by then.
	root, err := stateguard.Open(real)
	if err != nil {
		return err
	}
	defer root.Close()
	// What to remove is read before anything is stopped: a damaged record
	// stops Down before it does anything.
	created, err := stateguard.ReadManifest(n.l.root)
	if err != nil {
		return err
	}
	// The fixed-name host resources belong to whichever node claimed them
	// last; another node's are left alone.
	owner := hostFiles.Owner()
	owns := owner != "" && stateguard.SameDir(owner, real)
	if !owns && owner != "" {
		n.cfg.Log.Info("Leaving the host's node resources to the node that owns them", "owner", owner, "cgroup", CgroupRoot, "bridge", BridgeName)
	}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range slices.Backward(components) {
		if c.beforeStop != nil {
			note(c.beforeStop(n))
		}
		note(n.stopComponent(c.name, stopGrace))
		if c.afterStop != nil {
			note(c.afterStop(n))
		}
	}

	var hostFailed error
	if owns {
		var kept error
		hostFailed, kept = clearHost(created.HostDirs)
		note(hostFailed)
		note(kept)
	}
	// A state entry holding a host mount stays (withoutHostMounts).
	for _, name := range created.State {
		note(withoutHostMounts(root, name, root.RemoveAll))
	}
	// The logs stay, as they explain a failure after the fact, and the
	// marker with them. The manifest goes once all it lists is gone.
	if len(errs) == 0 {
		note(root.RemoveAll(stateguard.ManifestFile))
	}
	if owns {
		note(n.releaseClaim(hostFailed))
	}
	return errors.Join(errs...)
}

// hostMountInfo is where the host's mounts are read: this process's
// mount namespace, the host's. Tests point it at a file of their own.
var hostMountInfo = "/proc/self/mountinfo"

// withoutHostMounts runs remove on the entry rel of the state directory r
// only while no host mount is at or below it. The node mounts nothing on
// the host (its mounts live in its own namespace, gone with its
// processes), so such a mount is somebody else's, and what holds it stays.
func withoutHostMounts(r *stateguard.Dir, rel string, remove func(rel string) error) error {
	p := filepath.Join(r.Path(), rel)
	mounts, err := isolation.MountsAt(hostMountInfo, p)
	if err != nil {
		return fmt.Errorf("%s: checking for host mounts: %w: left in place", p, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("%s holds host mounts the node did not make (%s): left in place", p, strings.Join(mounts, ", "))
	}
	return remove(rel)
}

// stopGrace is how long a component has to exit on SIGTERM.
const stopGrace = 10 * time.Second

// killJoinedAfterKubelet: whatever else joined the node (a suite and the
// kubelet it started) goes before the sandboxes, so that nobody starts them
// again.
func killJoinedAfterKubelet(n *Node) error { return n.killJoined() }

// removeSandboxesBeforeContainerd removes the pods' sandboxes through CRI.
// A failure is not fatal: what the runtime cannot remove is killed once it
// has stopped (killShimsAfterContainerd).
func removeSandboxesBeforeContainerd(n *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.removeSandboxes(ctx); err != nil {
		n.cfg.Log.Info("Removing pod sandboxes through CRI failed; their processes are killed instead", "err", err)
	}
	return nil
}

// killShimsAfterContainerd kills the shims containerd leaves running.
func killShimsAfterContainerd(n *Node) error { return isolation.KillShims(n.l.criSocket()) }
