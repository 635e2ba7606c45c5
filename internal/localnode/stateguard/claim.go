package stateguard

import (
	"fmt"
	"os"
	"path/filepath"
)

// MarkerFile marks a state directory as a node's: Up claims no non-empty
// directory, and Down touches none, without it. It stays after Down, with
// the logs.
const MarkerFile = ".critlet-local-node"

// ClusterMarkerFile marks a state directory as critlet-cluster's. The
// cluster holds its directory to the same rules and claims it with Claim,
// so it carries MarkerFile too; this second marker tells the two tools'
// directories apart, and each refuses the other's (RefuseCluster), lest
// one take the other's record for its own.
const ClusterMarkerFile = ".critlet-cluster"

// IsCluster reports whether dir carries ClusterMarkerFile.
func IsCluster(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, ClusterMarkerFile))
	return err == nil
}

// RefuseCluster refuses a cluster's state directory to a local node.
func RefuseCluster(dir string) error {
	if IsCluster(dir) {
		return fmt.Errorf("state directory %s is critlet-cluster's (it has %s), not a local node's: critlet-cluster down --state %s removes that cluster", dir, ClusterMarkerFile, shellQuote(dir))
	}
	return nil
}

// Claim creates what is missing of the state directory dir, each component
// checked once made (a name another user took first, as a directory or a
// link, is refused rather than used), marks it as a node's, and records
// what the node will create in it: before anything is made in it.
func Claim(dir string) error {
	d, err := createStateDir(dir)
	if err != nil {
		return err
	}
	err = d.WriteFile(MarkerFile, []byte("critlet local node state directory (local-node up and down; down keeps the logs and this file)\n"), 0o644)
	d.Close()
	if err != nil {
		return fmt.Errorf("marking the state directory: %w", err)
	}
	return recordStateEntries(dir)
}

// SameDir reports whether two paths name the same directory, by identity
// (device and inode), not spelling: a node may be brought up through a
// symlink and taken down through its target, or the other way round.
func SameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
