package localnode

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// hostLockFile serialises Up and Down of every node on the host: the
// owner file, the PID files and the health checks are read and written
// under it. On tmpfs, like the owner file; it stays, empty, since removing
// a lock file others may wait on would let two hold it.
var hostLockFile = "/run/critlet-local-node.lock"

// hostLockWait is how long Up or Down waits for another to finish.
var hostLockWait = 10 * time.Minute

// withHostLock runs fn holding the host's exclusive lock.
func withHostLock(log logr.Logger, fn func() error) error {
	f, err := os.OpenFile(hostLockFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening the host's local-node lock: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(hostLockWait)
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("locking %s: %w", hostLockFile, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another local-node up or down has held %s for %s: let it finish, or find it with fuser %s", hostLockFile, hostLockWait, hostLockFile)
		}
		if !waiting {
			log.Info("Waiting for another local-node up or down to finish", "lock", hostLockFile)
			waiting = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Closing the file releases the lock.
	return fn()
}

// lockedUp runs a start-up under the host lock.
func lockedUp(log logr.Logger, start func() (*Node, error)) (*Node, error) {
	var n *Node
	err := withHostLock(log, func() error {
		var err error
		n, err = start()
		return err
	})
	return n, err
}
