package stateguard

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The manifest (ManifestFile in the state directory) records what a node
// created, appended as it creates it, one entry a line: "state NAME" for an
// entry of the state directory, "hostdir PATH" for a host directory made as
// a mount point. Down removes what it lists and nothing else, so a state
// directory or host path the node found in place is never removed.
const ManifestFile = "manifest"

// stateEntries are what a node may create in its state directory, besides
// the logs and the marker, which stay after Down: the directory remains
// the node's.
var stateEntries = []string{"run", "pki", "etcd", "apiserver", "containerd", "cni", "images", "kubelet", "mounts", "sysctl"}

// mountPoints are the host directories the node's namespace mounts over:
// the only host paths (and their parents) a node may create.
var mountPoints = []string{"/run/containerd", "/run/netns", "/var/lib/cni", "/var/lib/kubelet"}

// record appends entries of one kind to the manifest of the state
// directory dir.
func record(dir, kind string, values ...string) error {
	var b strings.Builder
	for _, v := range values {
		fmt.Fprintf(&b, "%s %s\n", kind, v)
	}
	if err := appendManifest(dir, []byte(b.String())); err != nil {
		return fmt.Errorf("recording what the node creates: %w", err)
	}
	return nil
}

// appendManifest opens the state directory dir (Open) and appends data to
// its manifest, never through a link.
func appendManifest(dir string, data []byte) error {
	d, err := Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.appendFile(ManifestFile, data, 0o644)
}

// recordStateEntries records the entries a node will create in its state
// directory dir: those not already there (a node's earlier run recorded
// those).
func recordStateEntries(dir string) error {
	var fresh []string
	for _, e := range stateEntries {
		if _, err := os.Lstat(filepath.Join(dir, e)); errors.Is(err, fs.ErrNotExist) {
			fresh = append(fresh, e)
		}
	}
	return record(dir, "state", fresh...)
}

// Manifest holds the recorded entries, checked: a line that is not an
// entry this package writes is an error, so that a damaged manifest makes
// Down stop rather than remove the wrong thing.
type Manifest struct {
	State    []string // names in the state directory
	HostDirs []string // host directories, in creation order
	private  []string // the node's PrivateDirs, recorded before their mount points
}

// ReadManifest reads the manifest of the state directory dir; a missing one
// lists nothing.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("reading the node's manifest: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		kind, value, _ := strings.Cut(sc.Text(), " ")
		switch {
		case kind == "state" && slices.Contains(stateEntries, value):
			m.State = append(m.State, value)
		case kind == "private" && MayCoverOnHost(value):
			m.private = append(m.private, value)
		case kind == "hostdir" && mayCreateOnHost(value, m.private):
			m.HostDirs = append(m.HostDirs, value)
		default:
			return m, fmt.Errorf("%s line %d: %q is not an entry a node records: nothing removed", path, line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("reading the node's manifest: %w", err)
	}
	return m, nil
}

// mayCreateOnHost reports whether dir is one of mountPoints or private (the
// node's PrivateDirs) or a parent of one, and no system directory.
func mayCreateOnHost(dir string, private []string) bool {
	if !MayCoverOnHost(dir) {
		return false
	}
	return slices.ContainsFunc(append(slices.Clip(mountPoints), private...), func(mp string) bool { return mp == dir || strings.HasPrefix(mp, dir+"/") })
}

// MayCoverOnHost reports whether dir is a clean absolute path and no system
// directory: one the node may mount over.
func MayCoverOnHost(dir string) bool {
	return dir == filepath.Clean(dir) && filepath.IsAbs(dir) && !slices.Contains(systemDirs, dir)
}

// MakeHostDirs records private, the node's PrivateDirs, in the manifest of
// the state directory stateDir, so that Down accepts their mount points,
// then makes each of dirs on the host (hostDir).
func MakeHostDirs(stateDir string, private, dirs []string) error {
	if len(private) > 0 {
		if err := record(stateDir, "private", private...); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		if err := hostDir(stateDir, d, private); err != nil {
			return err
		}
	}
	return nil
}

// hostDir makes a mount point on the host, one of mountPoints or private, or
// a parent of one, recording each directory it creates, so that Down
// removes exactly those again.
func hostDir(stateDir, dir string, private []string) error {
	if !mayCreateOnHost(dir, private) {
		return fmt.Errorf("mount point %s: not a path the node mounts over", dir)
	}
	var created []string
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		created = append(created, p)
	}
	if len(created) == 0 {
		return nil
	}
	slices.Reverse(created) // parents first, as they are made
	// Recorded before they exist: an interrupted Up leaves no unrecorded
	// directory behind.
	if err := record(stateDir, "hostdir", created...); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating mount point %s: %w", dir, err)
	}
	return nil
}

// RemoveHostDirs removes the recorded host directories, deepest first, each
// only if it is still an empty directory: what somebody else put in one (a
// system containerd's state, say) keeps it, and its parents, in place, and
// is reported in kept; failed is what could not be removed otherwise.
func RemoveHostDirs(dirs []string) (kept, failed error) {
	var keep, fail []error
	for _, d := range slices.Backward(dirs) {
		err := syscall.Rmdir(d)
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			keep = append(keep, fmt.Errorf("%s was created by the local node but now holds entries it did not make: left in place", d))
		case errors.Is(err, syscall.ENOTDIR):
			keep = append(keep, fmt.Errorf("%s was created by the local node as a directory but is none now: left in place", d))
		default:
			fail = append(fail, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	return errors.Join(keep...), errors.Join(fail...)
}
