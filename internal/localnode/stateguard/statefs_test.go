package stateguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	sgt "github.com/critlet/critlet/internal/localnode/stateguard/stateguardtest"
)

// Removal happens in the directory that was checked and opened: a state
// directory swapped for a link afterwards (to /var/lib, say) loses nothing
// where the link points. A link inside a removed tree is removed, not
// followed.
func TestRemovalFollowsNoSwappedLink(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "node")
	for _, d := range []string{"node/containerd/root", "varlib/containerd", "elsewhere"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(tmp, "varlib", "containerd", "keep")
	inner := filepath.Join(tmp, "elsewhere", "keep")
	for _, f := range []string{keep, inner} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sgt.Plant(t, filepath.Join(tmp, "elsewhere"), filepath.Join(dir, "containerd", "root", "link"))

	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The swap, after the checks.
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	sgt.Plant(t, filepath.Join(tmp, "varlib"), dir)

	if err := r.RemoveAll("containerd"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("removal went through the swapped-in link: %v", err)
	}
	if _, err := os.Stat(inner); err != nil {
		t.Errorf("removal followed a link inside the tree: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir+".moved", "containerd")); !os.IsNotExist(err) {
		t.Errorf("the checked directory's entry is still there: %v", err)
	}
}

// A read-only tree (Go's module cache) is removed whole.
func TestRemoveAllReadOnlyTree(t *testing.T) {
	dir := t.TempDir()
	ro := filepath.Join(dir, "kubelet", "gopath", "pkg", "mod")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "f"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ro, filepath.Dir(ro)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.RemoveAll("kubelet"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "kubelet")); !os.IsNotExist(err) {
		t.Errorf("kubelet still there: %v", err)
	}
}

// A directory made by Create is refused, before anything is made in or below it, where
// the node's state directory would be: another user's, below another
// user's, group-writable, a system directory.
func TestCreateTrustedDirRefuses(t *testing.T) {
	theirs := sgt.Mkdir(t, filepath.Join(t.TempDir(), "theirs"), 0o755, sgt.Nobody)
	shared := sgt.Mkdir(t, filepath.Join(t.TempDir(), "shared"), 0o775, 0)
	for dir, want := range map[string]string{
		theirs:                          theirs + " is owned by uid 65534",
		filepath.Join(theirs, "suite"):  theirs + " is owned by uid 65534",
		filepath.Join(shared, "suite"):  "can be written by its group or by others",
		"/var/lib":                      "system or home directory",
		"relative/suite":                "not an absolute path",
		filepath.Join(theirs, "a", "b"): "owned by uid 65534",
	} {
		d, err := Create(dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			if d != nil {
				d.Close()
			}
			t.Errorf("Create(%s) = %v, want a refusal saying %q", dir, err, want)
		}
	}
	for _, d := range []string{theirs, shared} {
		if entries, _ := os.ReadDir(d); len(entries) > 0 {
			t.Errorf("a refused directory got entries: %s holds %v", d, entries)
		}
	}
}

// What is removed, made and written through a Dir goes through no
// link: a planted link is removed itself, never followed, and a write
// where one is fails, the link's target keeping its contents.
func TestTrustedDirWritesThroughNoLink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "suite")
	d, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != dir {
		t.Errorf("Path() = %s, want %s", d.Path(), dir)
	}
	file := sgt.Victim(t)
	victimDir := filepath.Dir(file)
	sgt.Plant(t, file, filepath.Join(dir, "report.md"))
	sgt.Plant(t, victimDir, filepath.Join(dir, "root"))

	if err := d.WriteFile("report.md", []byte("report"), 0o644); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("writing over a planted link: %v, want a refusal naming the link", err)
	}
	if _, err := d.MkdirAll("root/var/lib/dpkg", 0o755); err == nil {
		t.Error("made a directory through a planted link")
	}
	root, err := d.Fresh("root", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		t.Errorf("%s after Fresh: %v, %v; want a directory of its own", root, fi, err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
		t.Errorf("the links' target: %q, %v; want it untouched", b, err)
	}
	if entries, _ := os.ReadDir(victimDir); len(entries) != 1 {
		t.Errorf("the linked directory holds %v, want only what it held", entries)
	}
	if err := d.RemoveAll("report.md"); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("report.md", []byte("report"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "report.md")); err != nil || string(b) != "report" {
		t.Errorf("report.md: %q, %v", b, err)
	}
}
