package localnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// TrustedDir is a directory held to the rule the node holds its own state
// directory to (safepath.go), open, with the node's writes that never go
// through a link (statefs.go). It is for what runs as root beside a node
// and keeps files of its own, e.g. a test suite whose state directory
// holds a node's: below a directory made through it, only root can change
// anything.
type TrustedDir struct{ r *stateRoot }

// CreateTrustedDir refuses a system or home directory, and a directory
// that anyone but root could change (the directory, a directory above it
// or a link on the way); it creates what is missing of dir, each
// component checked once made, and opens it. Nothing is written before
// those checks pass.
func CreateTrustedDir(dir string) (*TrustedDir, error) {
	if err := refuseSystemDir(dir); err != nil {
		return nil, err
	}
	r, err := createStateDir(dir)
	if err != nil {
		return nil, err
	}
	return &TrustedDir{r}, nil
}

// Path is the directory's resolved path: no link on it.
func (d *TrustedDir) Path() string { return d.r.path }

// Close closes the directory.
func (d *TrustedDir) Close() { d.r.close() }

// RemoveAll removes the entry rel and all it holds; a link is removed, never
// followed.
func (d *TrustedDir) RemoveAll(rel string) error { return d.r.removeAll(rel) }

// MkdirAll makes the directory rel and its missing parents, through no
// link, and returns its path.
func (d *TrustedDir) MkdirAll(rel string, perm os.FileMode) (string, error) {
	if err := d.r.mkdirAll(rel, perm); err != nil {
		return "", err
	}
	return filepath.Join(d.r.path, rel), nil
}

// Fresh removes the entry rel, whatever it is, and makes it again as an
// empty directory; it returns its path.
func (d *TrustedDir) Fresh(rel string, perm os.FileMode) (string, error) {
	if err := d.RemoveAll(rel); err != nil {
		return "", fmt.Errorf("making %s afresh: %w", filepath.Join(d.r.path, rel), err)
	}
	return d.MkdirAll(rel, perm)
}

// WriteFile writes the file rel as os.WriteFile does, but never through a
// link: a link where it writes makes it fail.
func (d *TrustedDir) WriteFile(rel string, data []byte, perm os.FileMode) error {
	return d.r.writeFile(rel, data, perm)
}
