package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	cperrors "k8s.io/kubernetes/pkg/kubelet/checkpointmanager/errors"
)

// Dir and Key place the checkpoint under the kubelet's root directory:
// <root>/critlet/preemptions.
const (
	Dir = "critlet"
	Key = "preemptions"
)

// Store keeps the state in memory and writes every change through before
// returning. Its methods are safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	mgr   checkpointmanager.CheckpointManager
	state State
	now   func() time.Time
}

// Open reads the checkpoint under rootDir, creating its directory (owned by
// the kubelet, mode 0700) if needed. A missing checkpoint is an empty one; a
// corrupt or foreign one is logged and ignored (and replaced at the next
// write), never trusted. Preemptions gone stale are dropped.
func Open(logger klog.Logger, rootDir string, now func() time.Time) (*Store, error) {
	dir := filepath.Join(rootDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the preemption checkpoint directory: %w", err)
	}
	mgr, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the preemption checkpoint in %s: %w", dir, err)
	}
	s := &Store{mgr: mgr, now: now}
	doc := &document{}
	switch err := mgr.GetCheckpoint(Key, doc); {
	case err == nil:
		fresh, dropped := doc.state.Fresh(now())
		s.state = fresh
		logger.Info("Read the preemption checkpoint", "path", filepath.Join(dir, Key), "underWay", len(fresh), "stale", dropped)
	case errors.Is(err, cperrors.ErrCheckpointNotFound):
	default:
		logger.Error(err, "Ignoring the preemption checkpoint: no preemption will be resumed from it", "path", filepath.Join(dir, Key))
	}
	return s, nil
}

// Find returns the recorded preemption for the critical pod uid.
func (s *Store) Find(uid types.UID) (Preemption, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Find(uid)
}

// Record writes p, replacing any earlier record for its critical pod.
func (s *Store) Record(p Preemption) error {
	return s.update(func(st State) State { return st.With(p) })
}

// Started writes that the kill of victim, of uid's preemption, started at.
func (s *Store) Started(uid, victim types.UID, at time.Time) error {
	return s.update(func(st State) State { return st.Started(uid, victim, at) })
}

// Finish drops uid's preemption.
func (s *Store) Finish(uid types.UID) error {
	return s.update(func(st State) State { return st.Without(uid) })
}

// update applies change (and drops stale preemptions) and writes the result;
// when the write fails the state in memory is left as it was.
func (s *Store) update(change func(State) State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, _ := change(s.state).Fresh(s.now())
	if err := s.mgr.CreateCheckpoint(Key, &document{state: next}); err != nil {
		return fmt.Errorf("writing the preemption checkpoint: %w", err)
	}
	s.state = next
	return nil
}

var (
	installedMu sync.Mutex
	installed   *Store
)

// Install makes s the store the admission handler uses. The kubelet builds
// its handler with a fixed signature that carries no directory, so the
// preemption-resume patch opens the store from NewMainKubelet, which knows
// the root directory, and installs it here.
func Install(s *Store) {
	installedMu.Lock()
	defer installedMu.Unlock()
	installed = s
}

// Installed returns the store installed, or nil.
func Installed() *Store {
	installedMu.Lock()
	defer installedMu.Unlock()
	return installed
}
