package stateguard

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// testHost is a host whose files are the test's own, not the host's.
func testHost(t *testing.T) Host {
	dir := t.TempDir()
	return Host{LockFile: filepath.Join(dir, "lock"), OwnerFile: filepath.Join(dir, "owner"), LockWait: 10 * time.Minute}
}

// Two holders never overlap; the second waits for the first.
func TestHostLockExcludes(t *testing.T) {
	h := testHost(t)
	var mu sync.Mutex
	inside, overlaps := 0, 0
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.WithLock(logr.Discard(), func() error {
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(150 * time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if overlaps > 0 {
		t.Errorf("%d holders overlapped", overlaps)
	}

	// A holder that does not let go makes the next one give up, saying why.
	h.LockWait = 300 * time.Millisecond
	release := make(chan struct{})
	held := make(chan struct{})
	go h.WithLock(logr.Discard(), func() error { close(held); <-release; return nil })
	<-held
	if err := h.WithLock(logr.Discard(), func() error { return nil }); err == nil {
		t.Error("a second holder got the lock while the first held it")
	}
	close(release)
}
