//go:build packagecheck

package packagetest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
// the rest; a purge removes the settings too.
func TestUpgradeRemovePurgeKeepEdits(t *testing.T) {
	_, _, pkg := versions(t)
	r := newRoot(t)
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

	next := only(t, buildPackages(t, "CRITLET_PKG_RELEASE=2"), pkgName+"_*_"+runtime.GOARCH+".deb")
	mustInstall(t, r, next)
	wantState(t, r, pkgName, "installed", pkg+"-2")
	edited("after the upgrade")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)

	if _, err := r.Remove(pkgName); err != nil {
		t.Fatal(err)
	}
	wantState(t, r, pkgName, "config-files", "")
	edited("after the removal")
	for _, p := range []string{"/usr/bin/kubelet", "/usr/lib/systemd/system/kubelet.service", "/usr/lib/systemd/system/kubelet.service.d/20-critlet.conf"} {
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
}

// stockLikeDeb builds, with nfpm, a package shaped as the stock kubelet
// package (name kubelet, the stock binary, unit, /etc/default/kubelet as a
// configuration file, the empty directories), and one shaped as kubeadm's
// (its drop-in, depending on kubelet (>= 1.19.0)).
func stockLikeDebs(t *testing.T) (kubelet, kubeadm string) {
	t.Helper()
	upstream, _, _ := versions(t)
	dir := t.TempDir()
	env := filepath.Join(dir, "kubelet.env")
	writeFile(t, env, "KUBELET_EXTRA_ARGS=\n")
	configs := map[string]string{
		"kubelet": fmt.Sprintf(`name: kubelet
arch: %s
version: %s
release: "1.1"
maintainer: test
description: stand-in for the stock kubelet package
contents:
  - {src: %s, dst: /usr/bin/kubelet, file_info: {mode: 0o755}}
  - {src: %s, dst: /usr/lib/systemd/system/kubelet.service, file_info: {mode: 0o644}}
  - {src: %s, dst: /etc/default/kubelet, type: config|noreplace, file_info: {mode: 0o644}}
  - {dst: /var/lib/kubelet, type: dir}
  - {dst: /etc/kubernetes/manifests, type: dir}
`, runtime.GOARCH, upstream, stockBin, filepath.Join(repo, "build/systemd/kubelet.service"), env),
		"kubeadm": fmt.Sprintf(`name: kubeadm
arch: %s
version: %s
release: "1.1"
maintainer: test
description: stand-in for the stock kubeadm package
depends: ["kubelet (>= 1.19.0)"]
contents:
  - {src: %s, dst: /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf, file_info: {mode: 0o644}}
`, runtime.GOARCH, upstream, filepath.Join(repo, "test/package/testdata/10-kubeadm.conf")),
	}
	out := map[string]string{}
	for name, conf := range configs {
		cfg := filepath.Join(dir, name+".yaml")
		writeFile(t, cfg, conf)
		target := filepath.Join(dir, name+".deb")
		run(t, []string{"SOURCE_DATE_EPOCH=0"}, nfpmBin, "package", "--config", cfg, "--packager", "deb", "--target", target)
		out[name] = target
	}
	return out["kubelet"], out["kubeadm"]
}

// TestSwapWithStockPackage: on a node with the stock kubelet and kubeadm
// packages, installing critlet's replaces the stock package (dpkg removes
// it: Conflicts and Replaces), keeps kubeadm's package satisfied (Provides)
// and its drop-in in place, and keeps the edited /etc/default/kubelet;
// removing critlet's and installing the stock package again swaps back.
func TestSwapWithStockPackage(t *testing.T) {
	stock, kubeadm := stockLikeDebs(t)
	r := newRoot(t)
	mustInstall(t, r, stock)
	if _, err := r.InstallChecked(kubeadm); err != nil {
		t.Fatalf("the stand-in kubeadm package does not install beside the stock kubelet: %v", err)
	}
	edit := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	writeFile(t, r.Path("/etc/default/kubelet"), edit)

	out, err := r.Install(deb(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Removing kubelet") {
		t.Errorf("dpkg did not say it removed the stock package:\n%s", out)
	}
	wantState(t, r, "kubelet", "config-files", "")
	wantState(t, r, pkgName, "installed", "")
	wantState(t, r, "kubeadm", "installed", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)
	if got := readFile(t, r.Path("/etc/default/kubelet")); got != edit {
		t.Errorf("after the swap /etc/default/kubelet = %q, want the edit %q", got, edit)
	}
	if !exists(r.Path("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf")) {
		t.Error("kubeadm's drop-in went with the swap")
	}
	// kubeadm's package is satisfied by critlet's alone: reinstalling it
	// with dependencies checked succeeds.
	if _, err := r.InstallChecked(kubeadm); err != nil {
		t.Errorf("kubeadm's dependency on kubelet (>= 1.19.0) is not met by %s: %v", pkgName, err)
	}

	// Back: what apt-get install kubelet does (remove the conflicting
	// package, install the stock one).
	if _, err := r.Remove(pkgName); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, r, stock)
	wantState(t, r, "kubelet", "installed", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), stockBin)
	if got := readFile(t, r.Path("/etc/default/kubelet")); got != edit {
		t.Errorf("after swapping back /etc/default/kubelet = %q, want the edit %q", got, edit)
	}
	if !exists(r.Path("/usr/lib/systemd/system/kubelet.service")) {
		t.Error("after swapping back kubelet.service is missing")
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
