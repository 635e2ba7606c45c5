//go:build packagecheck

package packagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildPackages runs hack/release.sh package into a new directory with the
// extra environment, and returns the directory.
func buildPackages(t *testing.T, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	run(t, env, "hack/release.sh", "package", dir)
	return dir
}

// TestUpgradeRemovePurgeKeepEdits: an upgrade keeps edited settings files
// and takes the new binary; a removal keeps the settings files and removes
// the rest; a purge removes the settings too. The root is another
// directory's (dpkg --root, scripts run beside it with DPKG_ROOT): the
// scripts call no systemctl, not even one found first on their PATH.
func TestUpgradeRemovePurgeKeepEdits(t *testing.T) {
	_, _, pkg := versions(t)
	r := newRoot(t)
	hostBin := t.TempDir()
	writeFile(t, filepath.Join(hostBin, "systemctl"), readFile(t, "testdata/systemctl"))
	if err := os.Chmod(filepath.Join(hostBin, "systemctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "fake-systemd")
	r.Env = []string{"PATH=" + hostBin + ":" + os.Getenv("PATH"), "FAKE_SYSTEMD=" + calls}
	mustInstall(t, r, deb(t))
	editedKubelet := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	editedCritlet := readFile(t, r.Path("/etc/default/critlet")) + "CRITLET_PREEMPTION_PARALLELISM=4\n"
	writeFile(t, r.Path("/etc/default/kubelet"), editedKubelet)
	writeFile(t, r.Path("/etc/default/critlet"), editedCritlet)
	edited := func(when string) {
		t.Helper()
		if got := readFile(t, r.Path("/etc/default/kubelet")); got != editedKubelet {
			t.Errorf("%s: /etc/default/kubelet = %q, want the edit %q", when, got, editedKubelet)
		}
		if got := readFile(t, r.Path("/etc/default/critlet")); got != editedCritlet {
			t.Errorf("%s: /etc/default/critlet lost the edit: %q", when, got)
		}
	}

	next, _ := nextRelease(t)
	mustInstall(t, r, next)
	wantState(t, r, pkgName, "installed", pkg+"-2")
	edited("after the upgrade")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)

	if _, err := r.Remove(pkgName); err != nil {
		t.Fatal(err)
	}
	wantState(t, r, pkgName, "config-files", "")
	edited("after the removal")
	for _, p := range []string{"/usr/bin/kubelet", "/lib/systemd/system/kubelet.service", "/lib/systemd/system/kubelet.service.d/20-critlet.conf"} {
		if exists(r.Path(p)) {
			t.Errorf("after the removal %s is still there", p)
		}
	}

	mustInstall(t, r, next)
	edited("after installing again")
	if _, err := r.Purge(pkgName); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/default/kubelet", "/etc/default/critlet", "/usr/bin/kubelet"} {
		if exists(r.Path(p)) {
			t.Errorf("after the purge %s is still there", p)
		}
	}
	wantState(t, r, pkgName, "", "")
	if exists(filepath.Join(calls, "log")) {
		t.Errorf("installing into another root, the scripts ran systemctl:\n%s", readFile(t, filepath.Join(calls, "log")))
	}
}

// TestPackagesReproducible: building the packages again from the same
// commit and kubelet gives byte-identical files.
func TestPackagesReproducible(t *testing.T) {
	again := buildPackages(t)
	for _, f := range []string{deb(t), rpm(t)} {
		sameFile(t, f, filepath.Join(again, filepath.Base(f)))
	}
	if got := dirEntries(t, again); len(got) != 3 || got[0] != ".inputs" {
		t.Errorf("the second build made %q, want the two packages and .inputs", got)
	}
}

// TestPackagesLeftWhenUnchanged: make package with nothing changed leaves
// the packages as they are (make test asks for them while suites read
// them); a changed input builds them anew, the old ones gone.
func TestPackagesLeftWhenUnchanged(t *testing.T) {
	dir := buildPackages(t)
	stat := func() map[string]os.FileInfo {
		out := map[string]os.FileInfo{}
		for _, name := range dirEntries(t, dir) {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			out[name] = fi
		}
		return out
	}
	before := stat()
	_, stderr, code := runEnv(t, nil, "hack/release.sh", "package", dir)
	if code != 0 || !strings.Contains(stderr, "up to date") {
		t.Fatalf("make package again: exit %d, want 0 and \"up to date\":\n%s", code, stderr)
	}
	after := stat()
	for name, fi := range before {
		if a, ok := after[name]; !ok || !os.SameFile(fi, a) || !a.ModTime().Equal(fi.ModTime()) {
			t.Errorf("%s was rewritten by a build with nothing changed", name)
		}
	}
	run(t, []string{"CRITLET_PKG_RELEASE=7"}, "hack/release.sh", "package", dir)
	got := dirEntries(t, dir)
	if len(got) != 3 {
		t.Fatalf("after a build of revision 7 the directory holds %q, want its two packages and .inputs", got)
	}
	for _, name := range got[1:] {
		if !strings.Contains(name, "-7_") && !strings.Contains(name, "-7.") {
			t.Errorf("%s is not of revision 7: an input changed and the packages were not built anew", name)
		}
	}
}

// dirEntries lists dir's names, sorted.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
