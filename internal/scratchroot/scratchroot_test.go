package scratchroot

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/critlet/critlet/internal/testenv"
)

// buildDeb makes a package holding /usr/share/demo/file and the
// configuration file /etc/demo.conf, with dpkg-deb.
func buildDeb(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"DEBIAN/control":      "Package: demo\nVersion: " + version + "\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: demo\n",
		"DEBIAN/conffiles":    "/etc/demo.conf\n",
		"etc/demo.conf":       "setting=default\n",
		"usr/share/demo/file": "v" + version + "\n",
	}
	for p, c := range files {
		full := filepath.Join(dir, "pkg", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "demo.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "pkg"), deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	return deb
}

func TestLifecycle(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, tool, err)
	}
	r, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := func(want, version string) {
		t.Helper()
		got, v, err := r.State("demo")
		if err != nil {
			t.Fatal(err)
		}
		if got != want || (version != "" && v != version) {
			t.Errorf("state %q version %q, want %q %q", got, v, want, version)
		}
	}
	state("", "")
	if _, err := r.InstallChecked(buildDeb(t, "1")); err != nil {
		t.Fatal(err)
	}
	state("installed", "1")
	conf := r.Path("/etc/demo.conf")
	if err := os.WriteFile(conf, []byte("setting=edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Install(buildDeb(t, "2")); err != nil {
		t.Fatal(err)
	}
	state("installed", "2")
	if got, _ := os.ReadFile(conf); string(got) != "setting=edited\n" {
		t.Errorf("the upgrade replaced an edited configuration file: %q", got)
	}
	if _, err := r.Remove("demo"); err != nil {
		t.Fatal(err)
	}
	state("config-files", "")
	if _, err := os.Stat(r.Path("/usr/share/demo/file")); !os.IsNotExist(err) {
		t.Errorf("the removal left the package's file: %v", err)
	}
	if _, err := r.Purge("demo"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(conf); !os.IsNotExist(err) {
		t.Errorf("the purge left the configuration file: %v", err)
	}
	state("", "")
}
