package stateguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

// What the node writes, creates and removes in its state directory goes
// through a Dir: the directory opened once, from / down, each component
// without following a link and checked as it is opened (safepath.go), and
// then every entry below it reached from that open directory, again never
// through a link. A link planted where the node writes makes the write fail
// rather than land where the link points; a state directory swapped for a
// link after the checks is not the one that is written or emptied.

// Dir is a trusted directory, open: a node's state directory, or one that
// what runs as root beside a node keeps its own files in (Create).
type Dir struct {
	path string // resolved, for messages and mount checks
	fd   int
}

// openFlags open a directory for lookups and listing, never through a link.
const openFlags = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC

// Open checks dir (Trust) and opens it.
func Open(dir string) (*Dir, error) {
	return openOrCreate(dir, false)
}

// Create is for what runs as root beside a node and keeps files of its own,
// e.g. a test suite whose state directory holds a node's: below a directory
// made through it, only root can change anything. It refuses a system or
// home directory, and a directory that anyone but root could change (the
// directory, a directory above it or a link on the way); it creates what is
// missing of dir, each component checked once made, and opens it. Nothing
// is written before those checks pass.
func Create(dir string) (*Dir, error) {
	if err := refuseSystemDir(dir); err != nil {
		return nil, err
	}
	return createStateDir(dir)
}

// createStateDir creates the state directory's missing components, each
// checked once made, and opens it: a name another user took first, as a
// directory or a link, is refused rather than used.
func createStateDir(dir string) (*Dir, error) {
	return openOrCreate(dir, true)
}

func openOrCreate(dir string, create bool) (*Dir, error) {
	real, err := Trust(dir)
	if err != nil {
		return nil, err
	}
	root, err := syscall.Open("/", openFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /: %w", err)
	}
	fd, err := walkDirs(root, "/", real[1:], create, 0o755, checkTrusted)
	syscall.Close(root)
	if err != nil {
		var refused *untrustedError
		if errors.As(err, &refused) {
			return nil, refusedStateDir(dir, refused.err)
		}
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	return &Dir{path: real, fd: fd}, nil
}

// Path is the directory's resolved path: no link on it.
func (d *Dir) Path() string { return d.path }

// Close closes the directory.
func (d *Dir) Close() { syscall.Close(d.fd) }

// untrustedError is a refusal by checkTrusted met while walking.
type untrustedError struct{ err error }

func (e *untrustedError) Error() string { return e.err.Error() }

// walkDirs opens the directory rel below the directory dirfd (at path
// base), one component at a time and never through a link. With create,
// missing components are made with perm. check, if set, vets each
// component once it is open. The caller closes the returned descriptor.
func walkDirs(dirfd int, base, rel string, create bool, perm uint32, check func(path string, uid, mode uint32, last bool) error) (int, error) {
	fd, err := syscall.Openat(dirfd, ".", openFlags, 0)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", base, err)
	}
	comps := splitPath(rel)
	cur := base
	for i, c := range comps {
		if c == ".." {
			syscall.Close(fd)
			return -1, fmt.Errorf("%s: %q leads out of the directory", filepath.Join(base, rel), "..")
		}
		cur = filepath.Join(cur, c)
		next, err := syscall.Openat(fd, c, openFlags, 0)
		if errors.Is(err, syscall.ENOENT) && create {
			if err = syscall.Mkdirat(fd, c, perm); err == nil || errors.Is(err, syscall.EEXIST) {
				next, err = syscall.Openat(fd, c, openFlags, 0)
			}
		}
		if err != nil {
			err = describeOpenError(fd, c, cur, err)
			syscall.Close(fd)
			return -1, err
		}
		syscall.Close(fd)
		fd = next
		if check != nil {
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil {
				syscall.Close(fd)
				return -1, fmt.Errorf("%s: %w", cur, err)
			}
			if err := check(cur, st.Uid, st.Mode, i == len(comps)-1); err != nil {
				syscall.Close(fd)
				return -1, &untrustedError{err}
			}
		}
	}
	return fd, nil
}

// describeOpenError says why name could not be opened below dirfd: a link
// (O_NOFOLLOW's ELOOP) is named as such.
func describeOpenError(dirfd int, name, path string, err error) error {
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
		if target, rerr := readlinkat(dirfd, name); rerr == nil {
			return fmt.Errorf("%s is a symbolic link (to %s): the node neither writes nor removes through links in its state directory; remove the link", path, target)
		}
	}
	return fmt.Errorf("%s: %w", path, err)
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if errno != 0 {
		return "", errno
	}
	return string(buf[:n]), nil
}

// atRemoveDir is unlinkat's AT_REMOVEDIR, which package syscall does not
// export.
const atRemoveDir = 0x200

// unlinkat is unlinkat(2) with its flags, which syscall.Unlinkat lacks.
func unlinkat(dirfd int, name string, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags)); errno != 0 {
		return errno
	}
	return nil
}

// splitRel splits rel into its directory and its last component, refusing
// what names no entry below the root.
func splitRel(rel string) (dir, name string, err error) {
	rel = filepath.Clean(rel)
	if rel == "." || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", "", fmt.Errorf("%q is no entry of the state directory", rel)
	}
	dir, name = filepath.Split(rel)
	return dir, name, nil
}

// MkdirAll makes the directory rel and its missing parents with perm,
// through no link, and returns its path.
func (d *Dir) MkdirAll(rel string, perm os.FileMode) (string, error) {
	full := filepath.Join(d.path, rel)
	fd, err := walkDirs(d.fd, d.path, rel, true, uint32(perm.Perm()), nil)
	if err != nil {
		return "", fmt.Errorf("creating %s: %w", full, err)
	}
	syscall.Close(fd)
	return full, nil
}

// Fresh removes the entry rel, whatever it is, and makes it again as an
// empty directory; it returns its path.
func (d *Dir) Fresh(rel string, perm os.FileMode) (string, error) {
	if err := d.RemoveAll(rel); err != nil {
		return "", fmt.Errorf("making %s afresh: %w", filepath.Join(d.path, rel), err)
	}
	return d.MkdirAll(rel, perm)
}

// openFile opens the file rel with flags, creating it with perm; neither
// it nor a directory on the way may be a link.
func (d *Dir) openFile(rel string, flags int, perm os.FileMode) (*os.File, error) {
	dir, name, err := splitRel(rel)
	if err != nil {
		return nil, err
	}
	full := filepath.Join(d.path, rel)
	dfd, err := walkDirs(d.fd, d.path, dir, false, 0, nil)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(dfd)
	fd, err := syscall.Openat(dfd, name, flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, describeOpenError(dfd, name, full, err)
	}
	return os.NewFile(uintptr(fd), full), nil
}

// WriteFile writes data to rel, as os.WriteFile does, but never through a
// link: a link where it writes makes it fail.
func (d *Dir) WriteFile(rel string, data []byte, perm os.FileMode) error {
	f, err := d.openFile(rel, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if err := writeAndClose(f, data); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Join(d.path, rel), err)
	}
	return nil
}

// RemoveAll removes rel and, for a directory, all it holds; a link is
// removed itself, never followed.
func (d *Dir) RemoveAll(rel string) error {
	dir, name, err := splitRel(rel)
	if err != nil {
		return err
	}
	dfd, err := walkDirs(d.fd, d.path, dir, false, 0, nil)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", filepath.Join(d.path, rel), err)
	}
	defer syscall.Close(dfd)
	return removeAllAt(dfd, name, filepath.Join(d.path, rel))
}

// ClearDir removes everything in the directory rel and keeps it: a mount
// may refer to it.
func (d *Dir) ClearDir(rel string) error {
	full := filepath.Join(d.path, rel)
	fd, err := walkDirs(d.fd, d.path, rel, false, 0, nil)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clearing %s: %w", full, err)
	}
	return removeEntries(fd, full)
}

// removeAllAt removes name in the directory dirfd, whose entry is at path,
// and all it holds, through no link.
func removeAllAt(dirfd int, name, path string) error {
	err := unlinkat(dirfd, name, 0)
	switch {
	case err == nil, errors.Is(err, syscall.ENOENT):
		return nil
	case !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.EPERM):
		return fmt.Errorf("removing %s: %w", path, err)
	}
	unlinkErr := err
	fd, err := syscall.Openat(dirfd, name, openFlags, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("removing %s: %w", path, unlinkErr) // a file unlink refused
	case err != nil:
		return fmt.Errorf("removing %s: %w", path, err)
	}
	if err := removeEntries(fd, path); err != nil {
		return err
	}
	if err := unlinkat(dirfd, name, atRemoveDir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// removeEntries removes what the directory fd (at path) holds, and closes
// fd. A read-only directory (Go's module copies) is made writable first,
// for a caller without root's override of modes.
func removeEntries(fd int, path string) error {
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("listing %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err == nil && st.Mode&0o700 != 0o700 {
		_ = syscall.Fchmod(fd, 0o755)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, removeAllAt(fd, e.Name(), filepath.Join(path, e.Name())))
	}
	return errors.Join(errs...)
}

// appendFile appends data to rel, never through a link.
func (d *Dir) appendFile(rel string, data []byte, perm os.FileMode) error {
	f, err := d.openFile(rel, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_APPEND, perm)
	if err != nil {
		return err
	}
	return writeAndClose(f, data)
}

// writeAndClose writes data to f and closes it, returning the first error.
func writeAndClose(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
