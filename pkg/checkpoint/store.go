package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Dir and Key place the checkpoint under the kubelet's root directory:
// <root>/critlet/preemptions.
const (
	Dir = "critlet"
	Key = "preemptions"
)

// dirMode is the checkpoint directory's: the kubelet's alone.
const dirMode fs.FileMode = 0o700

// Store keeps the state in memory and writes every change through before
// returning. Its methods are safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	logger  klog.Logger
	rootDir string
	state   State
	now     func() time.Time
	// write replaces the file in dir; writeFile but in tests, which count.
	write func(dir *os.Root, blob []byte) error
}

// Open reads the checkpoint under rootDir, creating its directory (owned by
// the kubelet, mode 0700) if needed; a link in the directory's place is an
// error. A missing checkpoint is an empty one; a corrupt, foreign or
// oversized one, or one that is not a regular file, or one in a directory
// others could write to, is logged and ignored (and replaced at the next
// write), never trusted. Preemptions gone stale, or whose times cannot be
// trusted, are dropped.
func Open(logger klog.Logger, rootDir string, now func() time.Time) (*Store, error) {
	s := &Store{logger: logger, rootDir: rootDir, now: now, write: writeFile}
	dir, narrowed, err := s.openDir()
	if err != nil {
		return nil, fmt.Errorf("opening the preemption checkpoint directory in %s: %w", rootDir, err)
	}
	defer func() { _ = dir.Close() }()
	path := filepath.Join(rootDir, Dir, Key)
	blob, err := readFile(dir)
	if err == nil && narrowed {
		// Others may have written the file while they could.
		err = fmt.Errorf("%w: its directory was open to others until now", ErrForeign)
	}
	var state State
	if err == nil {
		state, err = decode(blob)
	}
	switch {
	case err == nil:
		at := now()
		var stale, untrusted int
		for _, p := range state {
			switch err := p.Resumable(at); {
			case err == nil:
				s.state = append(s.state, p)
			case errors.Is(err, ErrStale):
				stale++
			default:
				untrusted++
				logger.Error(err, "Ignoring a recorded preemption: it will not be resumed", "path", path,
					"requestingPod", klog.KRef(p.Namespace, p.Name), "podUID", p.PodUID)
			}
		}
		logger.Info("Read the preemption checkpoint", "path", path, "underWay", len(s.state), "stale", stale, "untrusted", untrusted)
	case errors.Is(err, fs.ErrNotExist):
	default:
		logger.Error(err, "Ignoring the preemption checkpoint: no preemption will be resumed from it", "path", path)
	}
	return s, nil
}

// Find returns the recorded preemption for the critical pod uid, if it may
// still be resumed now.
func (s *Store) Find(uid types.UID) (Preemption, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.state.Find(uid)
	if !ok {
		return Preemption{}, false
	}
	if err := p.Resumable(s.now()); err != nil {
		s.logger.Info("Not resuming the recorded preemption", "requestingPod", klog.KRef(p.Namespace, p.Name), "podUID", uid, "err", err)
		return Preemption{}, false
	}
	return p, true
}

// Record writes p, replacing any earlier record for its critical pod.
func (s *Store) Record(p Preemption) error {
	return s.update(func(st State) State { return st.With(p) })
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
	blob, err := encode(next)
	if err != nil {
		return fmt.Errorf("writing the preemption checkpoint: %w", err)
	}
	// The directory is opened for each write, as it was created: the
	// kubelet's own, never through a link. One removed since is made again.
	dir, _, err := s.openDir()
	if err != nil {
		return fmt.Errorf("writing the preemption checkpoint: opening its directory in %s: %w", s.rootDir, err)
	}
	defer func() { _ = dir.Close() }()
	if err := s.write(dir, blob); err != nil {
		return fmt.Errorf("writing the preemption checkpoint %s: %w", filepath.Join(s.rootDir, Dir, Key), err)
	}
	s.state = next
	return nil
}

// openDir opens <root>/critlet, creating it if missing, never through a
// link: one planted in its place would redirect the kubelet's reads and
// writes. A directory with a mode other than 0700 is narrowed to it, said
// so, and narrowed is true.
func (s *Store) openDir() (dir *os.Root, narrowed bool, err error) {
	// The kubelet creates its root directory (mode 0750) only once it runs,
	// after the checkpoint is opened.
	if err := os.MkdirAll(s.rootDir, 0o750); err != nil {
		return nil, false, fmt.Errorf("creating the root directory: %w", err)
	}
	root, err := os.OpenRoot(s.rootDir)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = root.Close() }()
	// mkdirat does not follow a link at Dir: it fails as existing.
	if err := root.Mkdir(Dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	seen, err := root.Lstat(Dir)
	if err != nil {
		return nil, false, err
	}
	if !seen.IsDir() {
		return nil, false, fmt.Errorf("%s is not a directory (mode %s)", Dir, seen.Mode())
	}
	// os.Root follows links that stay inside rootDir: what was opened must be
	// the directory just seen in Dir's place, not a link's target.
	dir, err = root.OpenRoot(Dir)
	if err != nil {
		return nil, false, err
	}
	opened, err := dir.Stat(".")
	if err == nil && !os.SameFile(seen, opened) {
		err = fmt.Errorf("%s was replaced while being opened", Dir)
	}
	if err == nil && opened.Mode().Perm() != dirMode {
		narrowed = true
		err = chmodDir(dir)
	}
	if err != nil {
		_ = dir.Close()
		return nil, false, err
	}
	if narrowed {
		s.logger.Info("Narrowed the preemption checkpoint directory to the kubelet alone", "path", filepath.Join(s.rootDir, Dir),
			"mode", opened.Mode().Perm().String(), "now", dirMode.String())
	}
	return dir, narrowed, nil
}

// chmodDir sets dir's mode through its own descriptor.
func chmodDir(dir *os.Root) error {
	f, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := f.Chmod(dirMode); err != nil {
		return fmt.Errorf("narrowing %s to mode %s: %w", Dir, dirMode, err)
	}
	return nil
}

// readFile returns the checkpoint's bytes, never through a link, and no more
// of them than a kubelet writes. A missing file is fs.ErrNotExist; one the
// kubelet did not write wraps ErrForeign.
func readFile(dir *os.Root) ([]byte, error) {
	seen, err := dir.Lstat(Key)
	if err != nil {
		return nil, err
	}
	switch {
	case !seen.Mode().IsRegular():
		return nil, fmt.Errorf("%w: not a regular file (mode %s)", ErrForeign, seen.Mode())
	case seen.Size() > maxFileBytes:
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a kubelet writes", ErrForeign, seen.Size(), maxFileBytes)
	}
	f, err := dir.Open(Key)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if opened, err := f.Stat(); err != nil {
		return nil, err
	} else if !os.SameFile(seen, opened) {
		return nil, fmt.Errorf("%w: replaced while being opened", ErrForeign)
	}
	// The file may grow after the Lstat: read one byte past the bound to
	// tell.
	blob, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(blob) > maxFileBytes {
		return nil, fmt.Errorf("%w: more than the %d bytes a kubelet writes", ErrForeign, maxFileBytes)
	}
	return blob, nil
}

// writeFile replaces the checkpoint with blob in one step: written to a
// temporary file, synced, renamed over the checkpoint (replacing a link
// there, not its target), and the directory synced so the rename survives
// a crash.
func writeFile(dir *os.Root, blob []byte) error {
	const tmp = "." + Key + ".tmp"
	// A temporary file left by a crash, or a link planted in its place, goes:
	// the file is then created anew, where O_EXCL follows no link.
	if err := dir.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing an earlier %s: %w", tmp, err)
	}
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	fail := func(step string, err error) error {
		_ = f.Close()
		_ = dir.Remove(tmp)
		return fmt.Errorf("%s %s: %w", step, tmp, err)
	}
	if _, err := f.Write(blob); err != nil {
		return fail("writing", err)
	}
	if err := f.Sync(); err != nil {
		return fail("syncing", err)
	}
	if err := f.Close(); err != nil {
		return fail("closing", err)
	}
	if err := dir.Rename(tmp, Key); err != nil {
		return fail("renaming", err)
	}
	d, err := dir.Open(".")
	if err != nil {
		return fmt.Errorf("opening the directory to sync it: %w", err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing the directory: %w", err)
	}
	return nil
}
