package localnode

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// The package's tests lock a file of their own, not the host's.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "critlet-localnode-test-")
	if err != nil {
		panic(err)
	}
	hostLockFile = filepath.Join(dir, "lock")
	// Nor do they claim, or read the claim on, the host's node resources.
	ownerFile = filepath.Join(dir, "owner")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Two holders never overlap; the second waits for the first.
func TestHostLockExcludes(t *testing.T) {
	var mu sync.Mutex
	inside, overlaps := 0, 0
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := withHostLock(logr.Discard(), func() error {
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
	hostLockWait = 300 * time.Millisecond
	defer func() { hostLockWait = 10 * time.Minute }()
	release := make(chan struct{})
	held := make(chan struct{})
	go withHostLock(logr.Discard(), func() error { close(held); <-release; return nil })
	<-held
	if err := withHostLock(logr.Discard(), func() error { return nil }); err == nil {
		t.Error("a second holder got the lock while the first held it")
	}
	close(release)
}
