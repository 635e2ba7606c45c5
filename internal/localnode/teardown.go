package localnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Down stops every component recorded under cfg.StateDir and removes what
// the node created: pod sandboxes and their processes, shims, cgroups, the
// CNI bridge, mounts, host mount points and all state but the logs. It goes
// on after a failed step, so that one stuck piece does not leave the rest
// behind, and reports every failure.
func Down(cfg Config) error {
	return withHostLock(cfg.logger(), func() error { return down(cfg) })
}

func down(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	// Only a directory a node has claimed is touched: a mistyped state
	// directory must not lose its contents.
	if err := checkStateDir(cfg.StateDir); err != nil {
		return err
	}
	real, err := trustStateDir(cfg.StateDir)
	if err != nil {
		return err
	}
	n := &Node{cfg: cfg, l: layout{real}}
	if _, err := os.Lstat(n.l.path(markerFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", cfg.StateDir, ErrNotANode)
	}
	// Opened once, checked: what is removed below is removed in this
	// directory, whatever its path names by then.
	root, err := openStateRoot(real)
	if err != nil {
		return err
	}
	defer root.close()
	// What to remove is read before anything is stopped: a damaged record
	// stops Down before it does anything.
	created, err := n.l.readManifest()
	if err != nil {
		return err
	}
	// The fixed-name host resources belong to whichever node claimed them
	// last; another node's are left alone.
	owner := hostOwner()
	owns := owner != "" && sameDir(owner, real)
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
		hostFailed, kept = clearHost(created.hostDirs)
		note(hostFailed)
		note(kept)
	}
	// A state entry holding a host mount stays (withoutHostMounts).
	for _, name := range created.state {
		note(root.withoutHostMounts(name, root.removeAll))
	}
	// The logs stay, as they explain a failure after the fact, and the
	// marker with them. The manifest goes once all it lists is gone.
	if len(errs) == 0 {
		note(root.removeAll(manifestFile))
	}
	if owns {
		note(n.releaseClaim(hostFailed))
	}
	return errors.Join(errs...)
}

// clearHost removes the fixed-name host resources an owner claim covers:
// the processes and cgroups under CgroupRoot, the bridge, and the host
// directories the node made. failed is what could not be cleared; kept
// names recorded host directories that somebody else has since filled,
// left to them. A variable so that tests stand in for the host's own
// cgroups and bridge, which a node running beside them may hold.
var clearHost = func(hostDirs []string) (failed, kept error) {
	kept, dirsFailed := removeHostDirs(hostDirs)
	failed = errors.Join(killCgroupProcs(CgroupRoot), removeCgroups(CgroupRoot), deleteBridge(), dirsFailed)
	return failed, kept
}

// releaseClaim gives up the owner claim once the resources it covers are
// cleared. After a failure the claim stays, so that the next Down of this
// node owns, and retries, what is left, and no other node starts on it.
func (n *Node) releaseClaim(hostFailed error) error {
	if hostFailed != nil {
		return fmt.Errorf("%s keeps naming %s as the owner of this host's node resources (cgroup %s, bridge %s) until they are cleared: "+
			"once the errors above are dealt with, run local-node down --state %s again", ownerFile, n.l.root, CgroupRoot, BridgeName, shellQuote(n.cfg.StateDir))
	}
	if err := os.Remove(ownerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("releasing the claim on this host's node resources: %w", err)
	}
	return nil
}

// withoutHostMounts runs remove on the entry rel only while no host mount
// is at or below it. The node mounts nothing on the host (its mounts live
// in its own namespace, gone with its processes), so such a mount is
// somebody else's, and what holds it stays.
func (r *stateRoot) withoutHostMounts(rel string, remove func(rel string) error) error {
	p := filepath.Join(r.path, rel)
	mounts, err := hostMountsAt(p)
	if err != nil {
		return fmt.Errorf("%s: checking for host mounts: %w: left in place", p, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("%s holds host mounts the node did not make (%s): left in place", p, strings.Join(mounts, ", "))
	}
	return remove(rel)
}

func deleteBridge() error {
	// Without ip(8) Up never started, so there is no bridge.
	if _, err := exec.LookPath("ip"); err != nil {
		return nil
	}
	out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "does not exist") {
			return nil
		}
		return fmt.Errorf("checking network device %s: %v: %s", BridgeName, err, out)
	}
	if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting network device %s: %v: %s", BridgeName, err, out)
	}
	return nil
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
func killShimsAfterContainerd(n *Node) error { return killShims(n.l.criSocket()) }
