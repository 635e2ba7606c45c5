//go:build packagecheck

package packagetest

import (
	"os"
	"path/filepath"
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
	entries, err := os.ReadDir(again)
	if err != nil || len(entries) != 2 {
		t.Errorf("the second build made %d files (%v), want 2", len(entries), err)
	}
}
