// Package atomicfile replaces files so that a reader (a running API
// server, ctr, the next build) sees the old contents or the new ones, never
// a partial file, and a crash never leaves an empty file under the name.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes what write produces to a temporary file beside path, with
// mode perm (not subject to the umask), syncs it and renames it over path.
// On any error the temporary file is removed and path is left as it was.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()
	// The final mode is set before the contents land and before the file is
	// visible under its name.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = write(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Makes the rename durable; a directory that cannot be synced has
	// been renamed in all the same.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteFile is Write of data.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
