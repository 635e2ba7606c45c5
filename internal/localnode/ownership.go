package localnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// checkHostFree checks, before a node starts, that nothing holds its ports,
// bridge or cgroup root, so that these are reported as such rather than as
// a component dying.
func (n *Node) checkHostFree() error {
	// A RuntimeOnly node's ports and bridge are in its own network.
	if !n.cfg.RuntimeOnly {
		if err := n.cfg.Ports.checkFree(); err != nil {
			return err
		}
		if out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput(); err == nil {
			return fmt.Errorf("network device %s already exists, not made by this node: %s", BridgeName, strings.TrimSpace(string(out)))
		}
	}
	if procs := cgroupProcs(CgroupRoot); len(procs) > 0 {
		return fmt.Errorf("cgroup %s still holds processes %v, not started by this node", CgroupRoot, procs)
	}
	return nil
}

// ownerFile names, on the host, the state directory of the node that owns
// the fixed-name resources, resolved; it is on tmpfs, so a reboot, which
// removes those resources too, also removes it. Tests use a file of their
// own.
var ownerFile = "/run/critlet-local-node.owner"

// markerFile marks a state directory as a node's: Up claims no non-empty
// directory, and Down touches none, without it. It stays after Down, with
// the logs.
const markerFile = ".critlet-local-node"

// checkOwner refuses to start while another node owns the host's
// fixed-name resources. An owner whose state directory no longer holds a
// node (deleted while it ran, say) has its claim released if it left
// nothing on the host; otherwise what is left is named, with the commands
// that clear it.
func (n *Node) checkOwner() error {
	owner := hostOwner()
	if owner == "" || sameDir(owner, n.l.root) {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(owner, markerFile)); err == nil {
		return fmt.Errorf("the local node under %s owns this host's node resources (cgroup %s, bridge %s); stop it first: local-node down --state %s", owner, CgroupRoot, BridgeName, owner)
	}
	left := hostLeftovers()
	if len(left) == 0 {
		n.cfg.Log.Info("Releasing the claim of a node that is gone and left nothing on this host", "ownerFile", ownerFile, "owner", owner)
		if err := os.Remove(ownerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("releasing the claim of %s: %w", owner, err)
		}
		return nil
	}
	return fmt.Errorf("%s names %s as the owner of this host's node resources, but that directory no longer holds a local node (no %s); left on this host: %s. "+
		"To clear them, let that node's down find its directory again: mkdir -p %s && touch %s && local-node down --state %s "+
		"(host directories it made as mount points, among %s, are not recorded any more: remove any that are empty and unused by hand)",
		ownerFile, owner, markerFile, strings.Join(left, "; "), shellQuote(owner), shellQuote(filepath.Join(owner, markerFile)), shellQuote(owner), strings.Join(mountPoints, ", "))
}

// hostLeftovers describes the fixed-name node resources present on the
// host: cgroups under CgroupRoot (and their processes), and the bridge.
func hostLeftovers() []string {
	var left []string
	if dirs := cgroupDirs(CgroupRoot); len(dirs) > 0 {
		left = append(left, fmt.Sprintf("%d cgroups under %s with processes %v", len(dirs), CgroupRoot, cgroupProcs(CgroupRoot)))
	}
	if err := exec.Command("ip", "link", "show", BridgeName).Run(); err == nil {
		left = append(left, "network device "+BridgeName)
	}
	return left
}

// sameDir reports whether two paths name the same directory, by identity
// (device and inode), not spelling: a node may be brought up through a
// symlink and taken down through its target, or the other way round.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func hostOwner() string {
	b, err := os.ReadFile(ownerFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// claim marks the state directory as a node's, records what the node will
// create in it, and marks the host's fixed-name resources as this node's.
func (n *Node) claim() error {
	if err := n.l.writeFile(n.l.path(markerFile), []byte("critlet local node state directory (local-node up and down; down keeps the logs and this file)\n"), 0o644); err != nil {
		return fmt.Errorf("marking the state directory: %w", err)
	}
	if err := n.l.recordStateEntries(); err != nil {
		return err
	}
	// The resolved path: whatever link the node was reached through, the
	// owner is the directory itself.
	if err := writeNoFollow(ownerFile, []byte(n.l.root+"\n"), 0o644); err != nil {
		return fmt.Errorf("claiming the host's node resources: %w", err)
	}
	return nil
}

// writeNoFollow is os.WriteFile that refuses a link at path.
func writeNoFollow(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	return writeAndClose(f, data)
}
