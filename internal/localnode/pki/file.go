package pki

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/critlet/critlet/internal/atomicfile"
)

// write replaces path atomically and records it in s.Written.
func (s *Set) write(path string, data []byte, perm fs.FileMode) error {
	if err := atomicfile.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	s.Written = append(s.Written, path)
	return nil
}

// restrictKey tightens the mode of a private key that is otherwise kept:
// fixing the mode needs no new key.
func restrictKey(path string) error {
	// Lstat, and a link refused: chmod would change what it points to.
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("pki: checking %s: %w", filepath.Base(path), err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("pki: %s is not a regular file (%s): remove it", path, fi.Mode().Type())
	}
	if fi.Mode().Perm() == privateKeyMode {
		return nil
	}
	if err := os.Chmod(path, privateKeyMode); err != nil {
		return fmt.Errorf("pki: restricting %s: %w", filepath.Base(path), err)
	}
	return nil
}
