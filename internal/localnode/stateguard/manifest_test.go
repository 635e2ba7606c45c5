package stateguard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withMountPoints lets a test's directories stand for the node's mount
// points.
func withMountPoints(t *testing.T, mps ...string) {
	t.Helper()
	saved := mountPoints
	mountPoints = mps
	t.Cleanup(func() { mountPoints = saved })
}

// Every host directory the node makes is recorded before it exists, and
// removed again only while empty: a directory someone else filled keeps
// itself and its parents.
func TestHostDirsRecordedAndRemoved(t *testing.T) {
	dir := t.TempDir()
	base := t.TempDir()
	made := filepath.Join(base, "a", "b", "c")
	kept := filepath.Join(base, "kept", "x")
	withMountPoints(t, made, kept)
	for _, d := range []string{made, kept, base} { // base exists: not recorded
		if err := hostDir(dir, d, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/etc", filepath.Join(base, "elsewhere"), base + "/a/../kept"} {
		if err := hostDir(dir, d, nil); err == nil {
			t.Errorf("hostDir(%s) made a directory that is no mount point", d)
		}
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b"), made, filepath.Join(base, "kept"), kept}
	if !slices.Equal(m.HostDirs, want) {
		t.Fatalf("recorded %v, want %v", m.HostDirs, want)
	}

	theirs := filepath.Join(kept, "someone-elses")
	if err := os.WriteFile(theirs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	left, failed := RemoveHostDirs(m.HostDirs)
	if failed != nil {
		t.Errorf("removing the host directories failed: %v", failed)
	}
	if left == nil || !strings.Contains(left.Error(), kept+" was created by the local node but now holds entries") {
		t.Errorf("kept = %v, want the filled directory named and left", left)
	}
	for _, gone := range []string{made, filepath.Join(base, "a")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s still exists", gone)
		}
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("a file the node did not create was removed: %v", err)
	}
}

// Only entries the node records are accepted: anything else in the
// manifest makes Down stop before it removes anything.
func TestManifestRefusesForeignEntries(t *testing.T) {
	for _, line := range []string{
		"state ..", "state /etc", "state logs", "state " + MarkerFile, "hostdir /", "hostdir /var/lib", "hostdir /run/containerd/../..",
		"hostdir relative", "unmount /x", "state",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte("state run\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "nothing removed") {
			t.Errorf("manifest line %q: err = %v, want a refusal", line, err)
		}
	}
}
