package localnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
	n := &Node{cfg: cfg, l: layout{cfg.StateDir}}
	// Only a directory a node has claimed is touched: a mistyped state
	// directory must not lose its contents.
	if err := checkStateDir(cfg.StateDir); err != nil {
		return err
	}
	if _, err := os.Lstat(n.l.path(markerFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", cfg.StateDir, ErrNotANode)
	}
	// What to remove is read before anything is stopped: a damaged record
	// stops Down before it does anything.
	created, err := n.l.readManifest()
	if err != nil {
		return err
	}
	// The fixed-name host resources belong to whichever node claimed them
	// last; another node's are left alone.
	owns := hostOwner() == cfg.StateDir
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	stop := func(name string, grace time.Duration) { note(n.stopComponent(name, grace)) }

	stop(Kubelet, 10*time.Second)
	// Whatever else joined the node (a suite and the kubelet it started)
	// goes before the sandboxes, so that nobody starts them again.
	note(n.killJoined())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := n.removeSandboxes(ctx); err != nil {
		// Not fatal: what the runtime cannot remove is killed below.
		n.cfg.Log.Info("Removing pod sandboxes through CRI failed; their processes are killed instead", "err", err)
	}
	cancel()
	stop(Containerd, 10*time.Second)
	note(killShims(n.l.criSocket()))
	if owns {
		note(killCgroupProcs(CgroupRoot))
		note(removeCgroups(CgroupRoot))
	}
	stop(APIServer, 10*time.Second)
	stop(Etcd, 10*time.Second)

	if owns {
		note(deleteBridge())
		note(removeHostDirs(created.hostDirs))
		if err := os.Remove(ownerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			note(err)
		}
	}
	// The node mounts nothing on the host (its mounts live in its own
	// namespace, gone with its processes): a host mount in the state
	// directory is somebody else's, and the entry holding it stays.
	for _, name := range created.state {
		p := n.l.path(name)
		if mounts, err := hostMountsAt(p); err != nil || len(mounts) > 0 {
			note(errors.Join(err, fmt.Errorf("%s holds host mounts the node did not make (%s): left in place", p, strings.Join(mounts, ", "))))
			continue
		}
		note(removeAll(p))
	}
	// The logs stay, as they explain a failure after the fact, and the
	// marker with them. The manifest goes once all it lists is gone.
	if len(errs) == 0 {
		note(removeAll(n.l.path(manifestFile)))
	}
	return errors.Join(errs...)
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

// removeAll removes a directory tree; read-only directories (Go's module
// copies) are made writable first.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
