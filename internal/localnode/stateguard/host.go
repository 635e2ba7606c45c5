package stateguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Host is the host-wide files through which the nodes on one host keep out
// of each other's way: a lock that serialises their Up and Down, and the
// owner file that names the one node that owns the host's fixed-name
// resources (a cgroup root, a bridge, host mount points), which only one
// node at a time can hold.
type Host struct {
	// LockFile serialises Up and Down of every node on the host: the owner
	// file, the PID files and the health checks are read and written under
	// it. It stays, empty, since removing a lock file others may wait on
	// would let two hold it.
	LockFile string
	// OwnerFile names the state directory of the node that owns the
	// fixed-name resources, resolved.
	OwnerFile string
	// LockWait is how long Up or Down waits for another to finish.
	LockWait time.Duration
}

// SystemHost is the host's own files. They are on tmpfs, so a reboot, which
// removes the fixed-name resources too, also removes the claim on them.
// Tests use files of their own.
func SystemHost() Host {
	return Host{LockFile: "/run/critlet-local-node.lock", OwnerFile: "/run/critlet-local-node.owner", LockWait: 10 * time.Minute}
}

// WithLock runs fn holding the host's exclusive lock.
func (h Host) WithLock(log logr.Logger, fn func() error) error {
	f, err := os.OpenFile(h.LockFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening the host's local-node lock: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(h.LockWait)
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("locking %s: %w", h.LockFile, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another local-node up or down has held %s for %s: let it finish, or find it with fuser %s", h.LockFile, h.LockWait, h.LockFile)
		}
		if !waiting {
			log.Info("Waiting for another local-node up or down to finish", "lock", h.LockFile)
			waiting = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Closing the file releases the lock.
	return fn()
}

// Owner is the state directory named as the owner of the host's fixed-name
// resources, or "" when no node owns them.
func (h Host) Owner() string {
	b, err := os.ReadFile(h.OwnerFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Claim marks the host's fixed-name resources as the node's under stateDir,
// which is given resolved: whatever link the node was reached through, the
// owner is the directory itself.
func (h Host) Claim(stateDir string) error {
	if err := writeNoFollow(h.OwnerFile, []byte(stateDir+"\n"), 0o644); err != nil {
		return fmt.Errorf("claiming the host's node resources: %w", err)
	}
	return nil
}

// Release gives up the claim on the host's fixed-name resources; there
// being none is no error.
func (h Host) Release() error {
	if err := os.Remove(h.OwnerFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CheckOwner refuses to start the node under stateDir while another node
// owns the host's fixed-name resources, which resources describes for
// messages ("cgroup /critlet, bridge critlet0"). An owner whose state
// directory no longer holds a node (deleted while it ran, say) has its
// claim released if it left nothing on the host, by leftovers' account;
// otherwise what is left is named, with the commands that clear it.
func (h Host) CheckOwner(log logr.Logger, stateDir, resources string, leftovers func() []string) error {
	owner := h.Owner()
	if owner == "" || SameDir(owner, stateDir) {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(owner, MarkerFile)); err == nil {
		return fmt.Errorf("the local node under %s owns this host's node resources (%s); stop it first: local-node down --state %s", owner, resources, owner)
	}
	left := leftovers()
	if len(left) == 0 {
		log.Info("Releasing the claim of a node that is gone and left nothing on this host", "ownerFile", h.OwnerFile, "owner", owner)
		if err := h.Release(); err != nil {
			return fmt.Errorf("releasing the claim of %s: %w", owner, err)
		}
		return nil
	}
	return fmt.Errorf("%s names %s as the owner of this host's node resources, but that directory no longer holds a local node (no %s); left on this host: %s. "+
		"To clear them, let that node's down find its directory again: mkdir -p %s && touch %s && local-node down --state %s "+
		"(host directories it made as mount points, among %s, are not recorded any more: remove any that are empty and unused by hand)",
		h.OwnerFile, owner, MarkerFile, strings.Join(left, "; "), shellQuote(owner), shellQuote(filepath.Join(owner, MarkerFile)), shellQuote(owner), strings.Join(mountPoints, ", "))
}

// writeNoFollow is os.WriteFile that refuses a link at path.
func writeNoFollow(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	return writeAndClose(f, data)
}
