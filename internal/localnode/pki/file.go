package pki

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// write replaces path atomically and records it in s.Written.
func (s *Set) write(path string, data []byte, perm fs.FileMode) error {
	if err := writeFileAtomic(path, data, perm); err != nil {
		return err
	}
	s.Written = append(s.Written, path)
	return nil
}

// writeFileAtomic writes data to a temporary file in path's directory and
// renames it over path, so readers such as a running apiserver see either
// the old or the new contents, never a partial file.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir, name := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("pki: writing %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("pki: writing %s: %w", name, err)
		}
	}()
	// Set the final mode before the contents land and before the file is
	// visible under its real name; Chmod, unlike the create mode, ignores
	// the umask.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	// Without a sync, a crash soon after the rename can leave an empty file
	// under the real name.
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Some platforms cannot sync a
// directory; the rename has happened regardless, so that is not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	d.Sync()
	return nil
}

// restrictKey tightens the mode of a private key that is otherwise kept:
// fixing the mode needs no new key.
func restrictKey(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("pki: checking %s: %w", filepath.Base(path), err)
	}
	if fi.Mode().Perm() == privateKeyMode {
		return nil
	}
	if err := os.Chmod(path, privateKeyMode); err != nil {
		return fmt.Errorf("pki: restricting %s: %w", filepath.Base(path), err)
	}
	return nil
}
