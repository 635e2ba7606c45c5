// Package stateguardtest makes what the tests of the state guard, and of the
// node that writes through it, set against it: directories of another user,
// or of a given mode, and links planted where root writes, with a victim
// file behind them that must keep its contents.
package stateguardtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Nobody is a uid that is not root's: a user who could write a state
// directory it owns.
const Nobody = 65534

// Mkdir makes a directory with exactly mode, owned by uid.
func Mkdir(t *testing.T, path string, mode os.FileMode, uid int) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	return path
}

// Victim is a file outside the state directory that a planted link points
// to; it must keep its contents, "precious".
func Victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Plant makes link, and its missing parents, a symbolic link to target.
func Plant(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
