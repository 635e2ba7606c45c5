package localnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A TrustedDir is refused, before anything is made in or below it, where
// the node's state directory would be: another user's, below another
// user's, group-writable, a system directory.
func TestCreateTrustedDirRefuses(t *testing.T) {
	theirs := mkdir(t, filepath.Join(t.TempDir(), "theirs"), 0o755, nobody)
	shared := mkdir(t, filepath.Join(t.TempDir(), "shared"), 0o775, 0)
	for dir, want := range map[string]string{
		theirs:                          theirs + " is owned by uid 65534",
		filepath.Join(theirs, "suite"):  theirs + " is owned by uid 65534",
		filepath.Join(shared, "suite"):  "can be written by its group or by others",
		"/var/lib":                      "system or home directory",
		"relative/suite":                "not an absolute path",
		filepath.Join(theirs, "a", "b"): "owned by uid 65534",
	} {
		d, err := CreateTrustedDir(dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			if d != nil {
				d.Close()
			}
			t.Errorf("CreateTrustedDir(%s) = %v, want a refusal saying %q", dir, err, want)
		}
	}
	for _, d := range []string{theirs, shared} {
		if entries, _ := os.ReadDir(d); len(entries) > 0 {
			t.Errorf("a refused directory got entries: %s holds %v", d, entries)
		}
	}
}

// What is removed, made and written through a TrustedDir goes through no
// link: a planted link is removed itself, never followed, and a write
// where one is fails, the link's target keeping its contents.
func TestTrustedDirWritesThroughNoLink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "suite")
	d, err := CreateTrustedDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != dir {
		t.Errorf("Path() = %s, want %s", d.Path(), dir)
	}
	file := victim(t)
	victimDir := filepath.Dir(file)
	plant(t, file, filepath.Join(dir, "report.md"))
	plant(t, victimDir, filepath.Join(dir, "root"))

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
