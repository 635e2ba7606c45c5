package localnode

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
	n := testNode(t)
	base := t.TempDir()
	made := filepath.Join(base, "a", "b", "c")
	kept := filepath.Join(base, "kept", "x")
	withMountPoints(t, made, kept)
	for _, d := range []string{made, kept, base} { // base exists: not recorded
		if err := n.hostDir(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/etc", filepath.Join(base, "elsewhere"), base + "/a/../kept"} {
		if err := n.hostDir(d); err == nil {
			t.Errorf("hostDir(%s) made a directory that is no mount point", d)
		}
	}
	m, err := n.l.readManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b"), made, filepath.Join(base, "kept"), kept}
	if !slices.Equal(m.hostDirs, want) {
		t.Fatalf("recorded %v, want %v", m.hostDirs, want)
	}

	theirs := filepath.Join(kept, "someone-elses")
	if err := os.WriteFile(theirs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	left, failed := removeHostDirs(m.hostDirs)
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
		"state ..", "state /etc", "state logs", "state " + markerFile, "hostdir /", "hostdir /var/lib", "hostdir /run/containerd/../..",
		"hostdir relative", "unmount /x", "state",
	} {
		n := testNode(t)
		if err := os.WriteFile(n.l.path(manifestFile), []byte("state run\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := n.l.readManifest(); err == nil || !strings.Contains(err.Error(), "nothing removed") {
			t.Errorf("manifest line %q: err = %v, want a refusal", line, err)
		}
	}
}

// Down removes what the manifest lists and keeps the rest of the state
// directory: the logs, the marker, and what the node did not create.
func TestDownRemovesOnlyRecordedEntries(t *testing.T) {
	dir := t.TempDir()
	n := &Node{cfg: Config{StateDir: dir}, l: layout{dir}}
	// "images" was there before the node claimed the directory.
	for _, d := range []string{"logs", "images"} {
		if err := os.MkdirAll(n.l.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(n.l.path(markerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.l.recordStateEntries(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"run", "pki", "images/pause.tar"} {
		if err := os.MkdirAll(n.l.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink the node did not make, pointing out of the directory.
	outside := t.TempDir()
	if err := os.Symlink(outside, n.l.path("kubelet")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(Config{StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{markerFile, "images", "logs"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file behind a symlink was removed: %v", err)
	}
}

// Private directories must be paths the node may cover, and apart.
func TestCheckPrivateDirs(t *testing.T) {
	for _, c := range []struct {
		dirs []string
		want string // error text; empty: accepted
	}{
		{[]string{"/etc/kubernetes", "/var/lib/etcd"}, ""},
		{[]string{"/etc"}, "no system directory"},
		{[]string{"etc/kubernetes"}, "no system directory"},
		{[]string{"/etc/kubernetes/"}, "no system directory"},
		{[]string{"/etc/kubernetes", "/etc/kubernetes"}, "overlap"},
		{[]string{"/etc/kubernetes", "/etc/kubernetes/pki"}, "overlap"},
		{[]string{"/srv/a-b", "/srv/a/b"}, "share"},
	} {
		err := checkPrivateDirs(c.dirs)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkPrivateDirs(%q) = %v, want %q", c.dirs, err, c.want)
		}
	}
}
