package localnode

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// The cgroup root, the bridge and the host mount points have fixed names:
// one node at a time owns them, and the host's claim says which
// (stateguard.Host). Up checks them free and claims them; Down clears them
// and gives the claim up, only where its node is the owner.

// hostFiles are the host's lock and claim; the package's tests use files of
// their own.
var hostFiles = stateguard.SystemHost()

// hostResources names the fixed-name resources a claim covers, for
// messages.
var hostResources = fmt.Sprintf("cgroup %s, bridge %s", CgroupRoot, BridgeName)

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
	if procs := isolation.CgroupProcs(CgroupRoot); len(procs) > 0 {
		return fmt.Errorf("cgroup %s still holds processes %v, not started by this node", CgroupRoot, procs)
	}
	return nil
}

// checkOwner refuses to start while another node owns the host's
// fixed-name resources (stateguard.Host.CheckOwner).
func (n *Node) checkOwner() error {
	return hostFiles.CheckOwner(n.cfg.Log, n.l.root, hostResources, hostLeftovers)
}

// hostLeftovers describes the fixed-name node resources present on the
// host: cgroups under CgroupRoot (and their processes), and the bridge.
func hostLeftovers() []string {
	var left []string
	if dirs := isolation.CgroupDirs(CgroupRoot); len(dirs) > 0 {
		left = append(left, fmt.Sprintf("%d cgroups under %s with processes %v", len(dirs), CgroupRoot, isolation.CgroupProcs(CgroupRoot)))
	}
	if err := exec.Command("ip", "link", "show", BridgeName).Run(); err == nil {
		left = append(left, "network device "+BridgeName)
	}
	return left
}

// claim creates and marks the state directory as a node's, records what the
// node will create in it, and marks the host's fixed-name resources as this
// node's.
func (n *Node) claim() error {
	if err := stateguard.Claim(n.l.root); err != nil {
		return err
	}
	return hostFiles.Claim(n.l.root)
}

// clearHost removes the fixed-name host resources an owner claim covers:
// the processes and cgroups under CgroupRoot, the bridge, and the host
// directories the node made. failed is what could not be cleared; kept
// names recorded host directories that somebody else has since filled,
// left to them. A variable so that tests stand in for the host's own
// cgroups and bridge, which a node running beside them may hold.
var clearHost = func(hostDirs []string) (failed, kept error) {
	kept, dirsFailed := stateguard.RemoveHostDirs(hostDirs)
	failed = errors.Join(isolation.KillCgroupProcs(CgroupRoot), isolation.RemoveCgroups(CgroupRoot), deleteBridge(), dirsFailed)
	return failed, kept
}

// releaseClaim gives up the owner claim once the resources it covers are
// cleared. After a failure the claim stays, so that the next Down of this
// node owns, and retries, what is left, and no other node starts on it.
func (n *Node) releaseClaim(hostFailed error) error {
	if hostFailed != nil {
		return fmt.Errorf("%s keeps naming %s as the owner of this host's node resources (%s) until they are cleared: "+
			"once the errors above are dealt with, run local-node down --state %s again", hostFiles.OwnerFile, n.l.root, hostResources, shellQuote(n.cfg.StateDir))
	}
	if err := hostFiles.Release(); err != nil {
		return fmt.Errorf("releasing the claim on this host's node resources: %w", err)
	}
	return nil
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
