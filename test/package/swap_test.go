//go:build packagecheck

package packagetest

import (
	"runtime"
	"testing"

	"github.com/critlet/critlet/test/scratchroot"
	"github.com/critlet/critlet/test/testenv"
)

// nextRelease is this commit's packages as revision 2: what an upgrade
// installs.
func nextRelease(t *testing.T) (deb, rpm string) {
	t.Helper()
	dir := shared(t, "release-2", func(dir string) error {
		return runErr([]string{"CRITLET_PKG_RELEASE=2"}, "hack/release.sh", "package", dir)
	})
	return only(t, dir, pkgName+"_*_"+runtime.GOARCH+".deb"), only(t, dir, pkgName+"-*."+rpmArch+".rpm")
}

const (
	restartHint = "systemctl restart kubelet"
	startHint   = "systemctl enable --now kubelet"
	// Where the scripts keep state from one to the next (build/scripts).
	debScratch = "run/kubelet-critlet"
	rpmScratch = "var/lib/rpm-state/kubelet-critlet"
)

// TestDebSwapTable: the .deb's install, upgrade, removal and swaps with the
// stock packages on a node whose systemd runs (the fake one, Debian's
// preset policy: enable), kubelet.service before and after each, as the
// stand-in stock packages' real scripts and critlet's leave it:
//
//   - a fresh install is the stock package's: enabled by the preset, not
//     started;
//   - an upgrade, like the stock package's, does not restart the kubelet
//     (it runs the replaced binary) and says how to;
//   - a removal disables and stops the kubelet: nothing runs a deleted
//     binary;
//   - a swap-in keeps an enabled kubelet enabled and running, now
//     critlet's, whether apt removes the stock package first or dpkg -i
//     removes it in favour of critlet's, and on a merged-/usr system;
//   - a swap-back is critlet's removal, then the stock package's install
//     (apt orders them so; no script of critlet's runs after the stock
//     package's): enabled by the stock package's preset, stopped, and
//     critlet's prerm says to start it.
//
// The stock package's prerm disables and stops the kubelet before any of
// critlet's scripts run, so the state before a swap-in cannot be read:
// critlet takes the preset's answer, which the stock package's own
// postinst re-applies at every configure (last row).
func TestDebSwapTable(t *testing.T) {
	testenv.Need(t, "a Debian system root", scratchroot.CanChroot())
	stock, kubeadm := stockDebs(t)
	_, _, pkg := versions(t)
	next, _ := nextRelease(t)
	r, err := scratchroot.NewSystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb := &swapTable{format: ".deb", sd: installFakeSystemd(t, r.Dir, true, false), scratch: debScratch}
	dpkg := func(ops ...func() (string, error)) func() (string, error) {
		return func() (string, error) {
			var all string
			for _, op := range ops {
				out, err := op()
				all += out
				if err != nil {
					return all, err
				}
			}
			return all, nil
		}
	}
	install := func(debs ...string) func() (string, error) {
		return func() (string, error) { return r.Install(debs...) }
	}
	remove := func(p string) func() (string, error) { return func() (string, error) { return r.Remove(p) } }

	tb.step(t, "fresh install", enabledInactive, "", install(deb(t)))
	tb.sd.systemctl(t, "restart", kubeletUnit) // kubeadm join
	tb.step(t, "upgrade", enabledRunning("critlet (replaced)"), restartHint, install(next))
	wantState(t, r, pkgName, "installed", pkg+"-2")
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove", unitState{}, startHint, remove(pkgName))

	tb.step(t, "stock package's install", enabledInactive, "", install(stock, kubeadm))
	tb.sd.systemctl(t, "restart", kubeletUnit)
	edit := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	writeFile(t, r.Path("/etc/default/kubelet"), edit)
	tb.step(t, "swap-in: apt-get install ./kubelet-critlet.deb (apt removes kubelet, then installs)", enabledRunning("critlet"), "started",
		dpkg(remove("kubelet"), install(deb(t))))
	swappedIn(t, r, kubeadm, edit)

	tb.step(t, "swap-back: apt-get install kubelet (apt removes kubelet-critlet, then installs)", enabledInactive, startHint,
		dpkg(remove(pkgName), install(stock)))
	wantState(t, r, "kubelet", "installed", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), stockBin)
	if got := readFile(t, r.Path("/etc/default/kubelet")); got != edit {
		t.Errorf("after swapping back /etc/default/kubelet = %q, want the edit %q", got, edit)
	}
	tb.sd.systemctl(t, "start", kubeletUnit)

	row := tb.step(t, "swap-in: dpkg -i kubelet-critlet.deb (removes kubelet in favour)", enabledRunning("critlet"), "started", install(deb(t)))
	if len(row.calls) == 0 || row.calls[0] != "--no-reload disable kubelet.service" {
		t.Errorf("the stock package's prerm did not run first: systemctl calls %q", row.calls)
	}
	swappedIn(t, r, kubeadm, edit)

	// The state a swap-in cannot see: a kubelet the operator disabled and
	// stopped against the preset comes back as the preset has it.
	tb.step(t, "swap-back: apt-get install kubelet", enabledInactive, startHint, dpkg(remove(pkgName), install(stock)))
	tb.sd.systemctl(t, "disable", "--now", kubeletUnit)
	tb.step(t, "swap-in of a kubelet disabled against the preset", enabledRunning("critlet"), "started",
		dpkg(remove("kubelet"), install(deb(t))))

	t.Logf("the .deb with the stock packages (systemd running, Debian's preset policy):\n%s", tb.markdown())
}

// swappedIn checks what a swap-in keeps of the stock packages: kubeadm's
// package satisfied by critlet's and its drop-in in place, the operator's
// edit of /etc/default/kubelet, and critlet's unit (which a merged-/usr
// system would lose if the two packages named it differently).
func swappedIn(t *testing.T, r *scratchroot.Root, kubeadm, edit string) {
	t.Helper()
	wantState(t, r, "kubelet", "config-files", "")
	wantState(t, r, pkgName, "installed", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)
	for _, f := range []string{"/usr/lib/systemd/system/kubelet.service", "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
		"/usr/lib/systemd/system/kubelet.service.d/20-critlet.conf"} {
		if !exists(r.Path(f)) {
			t.Errorf("after the swap-in %s is missing", f)
		}
	}
	if got := readFile(t, r.Path("/etc/default/kubelet")); got != edit {
		t.Errorf("after the swap-in /etc/default/kubelet = %q, want the edit %q", got, edit)
	}
	if _, err := r.InstallChecked(kubeadm); err != nil {
		t.Errorf("kubeadm's dependency on kubelet (>= 1.19.0) is not met by %s: %v", pkgName, err)
	}
}

// TestRPMSwapTable: the .rpm's install, upgrade, removal and swaps with the
// stock packages on a node whose systemd runs (the fake one, Fedora's and
// RHEL's preset policy: disable *):
//
//   - a fresh install is the stock package's: disabled by the preset, not
//     started;
//   - an upgrade does not restart the kubelet and says how to;
//   - a removal disables and stops the kubelet;
//   - a swap-in (dnf install, rpm -U: Obsoletes) puts back exactly the
//     state %pre noted before the stock package's %preun disabled and
//     stopped the kubelet: enabled stays enabled, disabled disabled, and
//     a running kubelet runs critlet's binary;
//   - a swap-back in one transaction (dnf swap: the stock package installs
//     before critlet's is removed) leaves the enabled state to the stock
//     package's %post (its preset) and restarts a running kubelet into the
//     stock binary, saying how to enable it;
//   - a swap-back in two (dnf remove, then dnf install) is critlet's
//     removal and the stock package's install.
func TestRPMSwapTable(t *testing.T) {
	testenv.Need(t, "an rpm system root", scratchroot.CanChroot())
	stock, kubeadm := stockRPMs(t)
	_, _, pkg := versions(t)
	_, next := nextRelease(t)
	r, err := scratchroot.NewRPM(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb := &swapTable{format: ".rpm", sd: installFakeSystemd(t, r.Dir, true, true), scratch: rpmScratch}
	upgrade := func(rpms ...string) func() (string, error) {
		return func() (string, error) { return r.Upgrade(rpms...) }
	}
	erase := func(p string) func() (string, error) { return func() (string, error) { return r.Erase(p) } }
	installed := func(name, want string) {
		t.Helper()
		if v, err := r.Version(name); err != nil || v != want {
			t.Errorf("%s: installed %q (%v), want %q", name, v, err, want)
		}
	}

	tb.step(t, "fresh install", disabledInactive, "", upgrade(rpm(t)))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit) // the install guide's step
	tb.step(t, "upgrade", enabledRunning("critlet (replaced)"), restartHint, upgrade(next))
	installed(pkgName, pkg+"-2")
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove", unitState{}, startHint, erase(pkgName))

	tb.step(t, "stock package's install", disabledInactive, "", upgrade(stock, kubeadm))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit)
	edit := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	writeFile(t, r.Path("/etc/sysconfig/kubelet"), edit)
	tb.step(t, "swap-in: dnf install ./kubelet-critlet.rpm (obsoletes kubelet)", enabledRunning("critlet"), "started", upgrade(rpm(t)))
	installed("kubelet", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)
	for _, f := range []string{"/usr/lib/systemd/system/kubelet.service", "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
		"/usr/lib/systemd/system/kubelet.service.d/20-critlet.conf"} {
		if !exists(r.Path(f)) {
			t.Errorf("after the swap-in %s is missing", f)
		}
	}
	if got := readFile(t, r.Path("/etc/sysconfig/kubelet")); got != edit {
		t.Errorf("after the swap-in /etc/sysconfig/kubelet = %q, want the edit %q", got, edit)
	}

	tb.step(t, "swap-back: dnf swap kubelet-critlet kubelet (installs kubelet, then removes kubelet-critlet)",
		disabledRunning("stock"), "systemctl enable kubelet",
		func() (string, error) {
			out, err := r.InstallBeside(stock)
			if err != nil {
				return out, err
			}
			more, err := r.Erase(pkgName)
			return out + more, err
		})
	installed(pkgName, "")
	sameFile(t, r.Path("/usr/bin/kubelet"), stockBin)
	if got := readFile(t, r.Path("/etc/sysconfig/kubelet")); got != edit {
		t.Errorf("after swapping back /etc/sysconfig/kubelet = %q, want the edit %q", got, edit)
	}

	tb.sd.systemctl(t, "disable", "--now", kubeletUnit)
	tb.step(t, "swap-in of a disabled, stopped kubelet", disabledInactive, "", upgrade(rpm(t)))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit)
	tb.step(t, "swap-back: dnf remove kubelet-critlet, then dnf install kubelet", disabledInactive, startHint,
		func() (string, error) {
			out, err := r.Erase(pkgName)
			if err != nil {
				return out, err
			}
			more, err := r.Upgrade(stock)
			return out + more, err
		})

	t.Logf("the .rpm with the stock packages (systemd running, Fedora's and RHEL's preset policy):\n%s", tb.markdown())
}

// TestRPMSwapInImage: swapping in while building an image (no running
// systemd) keeps an enabled kubelet enabled, which the stock package's
// %preun alone would disable, and starts nothing.
func TestRPMSwapInImage(t *testing.T) {
	testenv.Need(t, "an rpm system root", scratchroot.CanChroot())
	stock, _ := stockRPMs(t)
	r, err := scratchroot.NewRPM(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb := &swapTable{format: ".rpm, no running systemd", sd: installFakeSystemd(t, r.Dir, false, true), scratch: rpmScratch}
	tb.step(t, "stock package's install", disabledInactive, "", func() (string, error) { return r.Upgrade(stock) })
	tb.sd.systemctl(t, "enable", kubeletUnit)
	tb.step(t, "swap-in", enabledInactive, "", func() (string, error) { return r.Upgrade(rpm(t)) })
	tb.step(t, "remove", unitState{}, "", func() (string, error) { return r.Erase(pkgName) })
	for _, c := range tb.sd.calls(t) {
		switch c {
		case "--no-reload preset kubelet.service", "enable kubelet.service", "is-enabled kubelet.service",
			"--no-reload enable kubelet.service", "--no-reload disable kubelet.service":
		default:
			t.Errorf("without a running systemd the scripts ran systemctl %s", c)
		}
	}
	t.Logf("%s", tb.markdown())
}

// TestDebInImage: installing and removing the .deb while building an image
// (no running systemd) applies the preset as the stock package does and
// neither starts, stops nor reloads anything.
func TestDebInImage(t *testing.T) {
	testenv.Need(t, "a Debian system root", scratchroot.CanChroot())
	r, err := scratchroot.NewSystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb := &swapTable{format: ".deb, no running systemd", sd: installFakeSystemd(t, r.Dir, false, false), scratch: debScratch}
	tb.step(t, "fresh install", enabledInactive, "", func() (string, error) { return r.Install(deb(t)) })
	tb.step(t, "remove", unitState{}, "", func() (string, error) { return r.Remove(pkgName) })
	for _, c := range tb.sd.calls(t) {
		if c != "--no-reload preset kubelet.service" && c != "--no-reload disable kubelet.service" {
			t.Errorf("without a running systemd the scripts ran systemctl %s", c)
		}
	}
	t.Logf("%s", tb.markdown())
}
