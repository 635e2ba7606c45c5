package localnode

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// fakeHost stands in for the host's cgroups and bridge (clearHost), which
// a node running beside the tests may hold: calls counts Down's calls and
// failed is what each returns as not cleared.
type fakeHost struct {
	calls  int
	failed error
	kept   error
}

func withFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	f := &fakeHost{}
	saved := clearHost
	clearHost = func([]string) (error, error) { f.calls++; return f.failed, f.kept }
	t.Cleanup(func() { clearHost = saved })
	return f
}

func setOwner(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(hostFiles.OwnerFile, []byte(dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hostFiles.OwnerFile) })
}

// The owner claim is compared by directory, not by spelling: a node
// brought up through a symlink is the owner when taken down through its
// target, and the other way round; Down then clears the host's resources.
func TestOwnershipByIdentity(t *testing.T) {
	for _, recordedByLink := range []bool{true, false} {
		tmp := t.TempDir()
		real := filepath.Join(tmp, "real")
		link := filepath.Join(tmp, "link")
		if err := os.Mkdir(real, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		markedNode(t, real)
		recorded, given := real, link
		if recordedByLink {
			recorded, given = link, real
		}
		setOwner(t, recorded)

		n := &Node{cfg: Config{StateDir: given}, l: layout{real}}
		if err := n.checkOwner(); err != nil {
			t.Errorf("owner recorded as %s, Up through %s: %v, want it recognised as itself", recorded, given, err)
		}
		host := withFakeHost(t)
		if err := Down(Config{StateDir: given}); err != nil {
			t.Fatal(err)
		}
		if host.calls != 1 {
			t.Errorf("owner recorded as %s, Down through %s: the host's node resources were not cleared", recorded, given)
		}
		if _, err := os.Stat(hostFiles.OwnerFile); !os.IsNotExist(err) {
			t.Errorf("owner recorded as %s, Down through %s: the claim was not released", recorded, given)
		}
	}

	// Another directory is another owner.
	a, b := t.TempDir(), t.TempDir()
	if stateguard.SameDir(a, b) || !stateguard.SameDir(a, a+"/") {
		t.Errorf("sameDir(%s, %s) or sameDir of one directory spelled twice is wrong", a, b)
	}
}

// A Down that fails to clear the host's node resources keeps the claim,
// says so, and the next Down, now owning them still, clears them and
// releases it. Host directories somebody else filled do not hold it.
func TestFailedCleanupKeepsTheClaim(t *testing.T) {
	dir := t.TempDir()
	markedNode(t, dir)
	setOwner(t, dir)
	host := withFakeHost(t)
	host.failed = errors.New("removing cgroup /critlet/pod1: device or resource busy")

	err := Down(Config{StateDir: dir})
	if err == nil || !strings.Contains(err.Error(), "device or resource busy") || !strings.Contains(err.Error(), "keeps naming "+dir+" as the owner") ||
		!strings.Contains(err.Error(), "local-node down --state "+shellQuote(dir)+" again") {
		t.Errorf("Down with a failed cleanup: %v, want the failure and the kept claim reported", err)
	}
	if owner := hostFiles.Owner(); owner != dir {
		t.Fatalf("after a failed cleanup the claim names %q, want %q kept", owner, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, stateguard.ManifestFile)); err != nil {
		t.Errorf("after a failed cleanup the manifest is gone: %v", err)
	}

	host.failed = nil
	if err := Down(Config{StateDir: dir}); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if host.calls != 2 {
		t.Errorf("the retry did not clear the host's node resources (%d calls)", host.calls)
	}
	if owner := hostFiles.Owner(); owner != "" {
		t.Errorf("after a successful retry the claim names %q, want it released", owner)
	}

	markedNode(t, dir)
	setOwner(t, dir)
	host.kept = errors.New("/run/containerd was created by the local node but now holds entries it did not make: left in place")
	if err := Down(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "left in place") {
		t.Errorf("Down leaving a filled host directory: %v, want it reported", err)
	}
	if owner := hostFiles.Owner(); owner != "" {
		t.Errorf("a host directory somebody else filled kept the claim (%q): nothing a retry could do", owner)
	}
}

// Resetting the kubelet removes its state with Down's guard: an entry that
// holds a host mount stays, the rest goes.
func TestResetKubeletKeepsHostMounts(t *testing.T) {
	n := testNode(t)
	vol := n.l.path("kubelet", "root", "pods", "p1", "volumes", "v")
	logs := n.l.path("mounts", "var-log", "pods")
	for _, d := range []string{vol, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(vol, "data")
	if err := os.WriteFile(data, []byte("somebody's"), 0o644); err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(info, []byte("22 1 0:21 / / rw - ext4 a rw\n30 22 0:40 / "+vol+" rw - nfs srv:/x rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := hostMountInfo
	hostMountInfo = info
	t.Cleanup(func() { hostMountInfo = saved })

	err := n.removeKubeletState()
	if err == nil || !strings.Contains(err.Error(), n.l.kubelet()+" holds host mounts the node did not make ("+vol+")") {
		t.Errorf("removeKubeletState with a host mount inside: %v, want it refused, naming the mount", err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Errorf("a file under a host mount was removed: %v", err)
	}
	if _, err := os.Stat(logs); !os.IsNotExist(err) {
		t.Errorf("the node's /var/log, holding no host mount, was not cleared: %v", err)
	}
	if _, err := os.Stat(n.l.mount("var-log")); err != nil {
		t.Errorf("the node's /var/log itself went: %v", err)
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
	if err := os.WriteFile(n.l.path(stateguard.MarkerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Records the entries a node creates, "images" aside.
	if err := stateguard.Claim(n.l.root); err != nil {
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
	if want := []string{stateguard.MarkerFile, "images", "logs"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file behind a symlink was removed: %v", err)
	}
}
