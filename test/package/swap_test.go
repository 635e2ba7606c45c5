//go:build packagecheck

package packagetest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/test/scratchroot"
	"github.com/critlet/critlet/test/testenv"
)

// thisRelease is this work tree's packages as make package builds them
// (revision 1), built for the run: the swap tables run the scripts in
// build/scripts, whatever _output/package holds (TestDebControl and TestRPM
// check that it carries them).
func thisRelease(t *testing.T) (deb, rpm string) {
	t.Helper()
	return release(t, "1")
}

// nextRelease is the same packages as revision 2: what an upgrade
// installs.
func nextRelease(t *testing.T) (deb, rpm string) {
	t.Helper()
	return release(t, "2")
}

func release(t *testing.T, revision string) (deb, rpm string) {
	t.Helper()
	dir := shared(t, "release-"+revision, func(dir string) error {
		return runErr([]string{"CRITLET_PKG_RELEASE=" + revision}, "hack/release.sh", "package", dir)
	})
	return only(t, dir, pkgName+"_*_"+runtime.GOARCH+".deb"), only(t, dir, pkgName+"-*."+rpmArch+".rpm")
}

const (
	restartHint = "systemctl restart kubelet"
	startHint   = "systemctl enable --now kubelet"
	// What the .deb says when a kubelet package's removal left the kubelet
	// stopped and the preset enabled.
	debStartHint = "to run critlet's kubelet: systemctl start kubelet"
	// What the .deb says when it started the kubelet on a swap-in.
	debStarted = "started kubelet.service with critlet's kubelet"
	// Where the scripts keep state from one to the next: the .rpm's
	// (build/scripts/rpm), and the .deb preinst's note of a swap-in.
	rpmScratch = "var/lib/rpm-state/kubelet-critlet"
	debScratch = "run/kubelet-critlet.swap-in"
	// Longer than the .deb's window for a swap-in (build/scripts/deb/preinst:
	// the kubelet package removed at most 10 minutes before, its kubelet
	// stopped at most 60 seconds before that).
	longAgo = 11 * time.Minute
)

// TestDebSwapTable: the .deb's install, upgrade, removal and swaps with the
// stock packages on a node whose systemd runs (the fake one, Debian's
// preset policy: enable), kubelet.service before and after each, as the
// stand-in stock packages' real scripts and critlet's leave it, with
// Debian's deb-systemd-invoke (the host's, run in the root):
//
//   - an install is the stock package's: enabled by the preset, and no
//     kubelet started or restarted; when a stock package was here, the
//     postinst says how to start critlet's kubelet;
//   - but a swap-in starts the kubelet the stock package's removal stopped
//     (its prerm disables and stops it before any script of critlet's:
//     dpkg -i runs it first, and apt removes the stock package in a dpkg
//     run of its own), through deb-systemd-invoke. The evidence is the
//     time systemd stopped the kubelet: the unit's state, or the journal
//     once systemd has unloaded the unit (apt's order: the stock postrm's
//     daemon-reload); a swap-in in each order, and without a journal in
//     each, shows which one answers. The stop must be the stock package's
//     removal's, in this dpkg run or just before dpkg recorded that
//     removal, at most 10 minutes ago: an operator's stop 2 minutes before
//     the swap, a stop long ago, critlet's own removal, and a stock package
//     removed long ago start nothing; a policy-rc.d forbidding starts is
//     obeyed; a failed unpack leaves no note of the swap-in;
//   - an upgrade, like the stock package's, does not restart the kubelet
//     (it runs the replaced binary) and says how to; so does an install
//     beside an operator's own running kubelet.service;
//   - a removal disables and stops the kubelet: nothing runs a deleted
//     binary;
//   - a swap-back is critlet's removal, then the stock package's install
//     (apt orders them so; no script of critlet's runs after the stock
//     package's): enabled by the stock package's preset, stopped, and
//     critlet's prerm says to start it.
func TestDebSwapTable(t *testing.T) {
	testenv.Need(t, "a Debian system root", scratchroot.CanChroot())
	_, err := exec.LookPath("deb-systemd-invoke")
	testenv.Need(t, "Debian's deb-systemd-invoke (init-system-helpers)", err)
	stock, kubeadm := stockDebs(t)
	_, _, pkg := versions(t)
	this, _ := thisRelease(t)
	next, _ := nextRelease(t)
	r, err := scratchroot.NewSystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"perl-base", "init-system-helpers"} {
		if err := scratchroot.CopyHostPackage(r.Dir, p); err != nil {
			t.Fatal(err)
		}
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
	// apt-get install ./kubelet-critlet.deb: apt removes the stock package,
	// then installs critlet's.
	apt := dpkg(remove("kubelet"), install(this))
	swapBack := func() {
		t.Helper()
		tb.sd.systemctl(t, "start", kubeletUnit)
		tb.step(t, "swap-back: apt-get install kubelet (apt removes kubelet-critlet, then installs)", enabledInactive, startHint,
			dpkg(remove(pkgName), install(stock)))
		wantState(t, r, "kubelet", "installed", "")
		sameFile(t, r.Path("/usr/bin/kubelet"), stockBin)
	}
	edit := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	// The rows in which critlet's scripts start the kubelet.
	started := map[string]bool{}
	swapIn := func(name string, op func() (string, error)) swapRow {
		t.Helper()
		started[name] = true
		row := tb.step(t, name, enabledRunning("critlet"), debStarted, op)
		swappedIn(t, r, kubeadm, edit)
		return row
	}

	tb.step(t, "fresh install", enabledInactive, "", install(this))
	tb.sd.systemctl(t, "restart", kubeletUnit) // kubeadm join
	tb.step(t, "upgrade", enabledRunning("critlet (replaced)"), restartHint, install(next))
	wantState(t, r, pkgName, "installed", pkg+"-2")
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove", unitState{}, startHint, remove(pkgName))
	tb.step(t, "install again", enabledInactive, "", install(this))
	tb.sd.systemctl(t, "start", kubeletUnit)
	replaceKubelet(t, r.Dir)
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove, /usr/bin/kubelet replaced by the operator's", unitState{}, startHint, remove(pkgName))

	tb.step(t, "stock package's install", enabledInactive, "", install(stock, kubeadm))
	tb.sd.systemctl(t, "restart", kubeletUnit)
	writeFile(t, r.Path("/etc/default/kubelet"), edit)
	swapIn("swap-in: apt-get install ./kubelet-critlet.deb (apt removes kubelet, then installs)", apt)

	// The stock package's configuration files stay after any swap-in: a
	// removal of critlet's and an install again is no swap-in, at once or
	// later.
	tb.sd.elapse(t, 2*time.Minute)
	tb.step(t, "remove (apt remove kubelet-critlet), 2 minutes after the swap-in", unitState{}, startHint, remove(pkgName))
	wantState(t, r, "kubelet", "config-files", "")
	tb.step(t, "install again at once (apt install kubelet-critlet)", enabledInactive, debStartHint, install(this))
	tb.sd.systemctl(t, "start", kubeletUnit)
	tb.step(t, "remove again", unitState{}, startHint, remove(pkgName))
	tb.sd.elapse(t, longAgo)
	tb.step(t, "install again 11 minutes later", enabledInactive, debStartHint, install(this))

	swapBack()
	if got := readFile(t, r.Path("/etc/default/kubelet")); got != edit {
		t.Errorf("after swapping back /etc/default/kubelet = %q, want the edit %q", got, edit)
	}
	tb.sd.systemctl(t, "start", kubeletUnit)
	row := swapIn("swap-in: dpkg -i kubelet-critlet.deb (removes kubelet in favour)", install(this))
	if want := []string{"--no-reload disable kubelet.service", "stop kubelet.service"}; len(row.calls) < 2 || !slices.Equal(row.calls[:2], want) {
		t.Errorf("the stock package's prerm did not disable and stop the kubelet before any script of critlet's: systemctl calls %q", row.calls)
	}

	// Without a journal (journald's Storage=none) systemd's unit state
	// still has the stop until the stock postrm's daemon-reload: dpkg -i
	// runs critlet's preinst before it, apt after.
	swapBack()
	tb.sd.systemctl(t, "start", kubeletUnit)
	tb.sd.journalOff(t, true)
	swapIn("swap-in: dpkg -i, no journal kept", install(this))
	swapBack()
	tb.sd.systemctl(t, "start", kubeletUnit)
	tb.step(t, "swap-in: apt-get install, no journal kept", enabledInactive, debStartHint, apt)
	tb.sd.journalOff(t, false)

	swapBack()
	tb.sd.systemctl(t, "start", kubeletUnit)
	tb.step(t, "stock package removed, not purged (apt remove kubelet)", unitState{}, "", remove("kubelet"))
	tb.sd.elapse(t, longAgo)
	tb.step(t, "install 11 minutes after the stock package's removal", enabledInactive, debStartHint, install(this))

	swapBack()
	tb.sd.systemctl(t, "disable", "--now", kubeletUnit)
	tb.sd.elapse(t, longAgo)
	tb.step(t, "swap-in (apt-get) of a stock kubelet disabled and stopped long ago", enabledInactive, debStartHint, apt)
	for _, order := range []struct {
		name string
		op   func() (string, error)
	}{{"dpkg -i", install(this)}, {"apt-get", apt}} {
		swapBack()
		tb.sd.systemctl(t, "disable", "--now", kubeletUnit)
		tb.sd.elapse(t, 2*time.Minute)
		tb.step(t, "swap-in ("+order.name+") of a stock kubelet the operator disabled and stopped 2 minutes before", enabledInactive,
			debStartHint, order.op)
	}

	swapBack()
	tb.sd.systemctl(t, "start", kubeletUnit)
	policy := r.Path("/usr/sbin/policy-rc.d")
	writeFile(t, policy, "#!/bin/sh\n# no service starts\nexit 101\n")
	if err := os.Chmod(policy, 0o755); err != nil {
		t.Fatal(err)
	}
	tb.step(t, "swap-in (dpkg -i) under a policy-rc.d forbidding starts (exit 101)", enabledInactive, debStartHint, install(this))
	if err := os.Remove(policy); err != nil {
		t.Fatal(err)
	}

	// A swap-in whose unpack fails (a file of critlet's belongs to another
	// package): dpkg runs critlet's postrm abort-install, which drops the
	// preinst's note.
	swapBack()
	tb.sd.systemctl(t, "start", kubeletUnit)
	if _, err := r.Remove("kubelet"); err != nil {
		t.Fatal(err)
	}
	blocker := blockerDeb(t, "/usr/share/doc/kubelet-critlet/LICENSE")
	if _, err := r.Install(blocker); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Install(this); err == nil {
		t.Errorf("installing over another package's file went through:\n%s", out)
	}
	if state, _, err := r.State(pkgName); err != nil || state == "installed" {
		t.Errorf("after a failed install %s is %q (%v)", pkgName, state, err)
	}
	if exists(r.Path(debScratch)) {
		t.Errorf("a failed swap-in left %s behind", debScratch)
	}
	if s := tb.sd.unit(t); s.Active {
		t.Errorf("a failed swap-in left kubelet.service %v", s)
	}
	if _, err := r.Purge("blocker"); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{pkgName, "kubelet"} {
		if _, err := r.Purge(p); err != nil {
			t.Fatal(err)
		}
	}
	operatorKubelet(t, tb.sd)
	tb.step(t, "fresh install beside an operator's own running kubelet.service", enabledRunning("stock (replaced)"), restartHint,
		install(this))

	// Only a swap-in starts the kubelet, and only with start (through
	// deb-systemd-invoke): never a restart.
	for _, row := range tb.rows {
		s := starts(row.calls)
		switch {
		case !started[row.step] && len(s) > 0:
			t.Errorf(".deb %s: the scripts started a kubelet: systemctl %q", row.step, s)
		case started[row.step] && (len(s) != 1 || !strings.Contains(" "+s[0]+" ", " start ")):
			t.Errorf(".deb %s: the scripts started the kubelet with systemctl %q, want one start", row.step, s)
		}
	}
	t.Logf("the .deb with the stock packages (systemd running, Debian's preset policy):\n%s", tb.markdown())
}

// blockerDeb is a package named blocker holding the file path.
func blockerDeb(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pkg/DEBIAN/control"),
		"Package: blocker\nVersion: 1\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: holds a path\n")
	writeFile(t, filepath.Join(dir, "pkg", path), "blocker\n")
	deb := filepath.Join(dir, "blocker.deb")
	run(t, nil, "dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "pkg"), deb)
	return deb
}

// replaceKubelet puts another binary (the stock kubelet) at
// /usr/bin/kubelet in the root, as an operator's install(1) does: a new
// file in its place.
func replaceKubelet(t *testing.T, root string) {
	t.Helper()
	tmp := filepath.Join(root, "usr/bin/.kubelet.operator")
	copyFile(t, stockBin, tmp, 0o755)
	if err := os.Rename(tmp, filepath.Join(root, "usr/bin/kubelet")); err != nil {
		t.Fatal(err)
	}
}

// operatorKubelet is a node where no package installed the kubelet: the
// operator put a kubelet (the stock one) at /usr/bin/kubelet and its unit in
// /etc/systemd/system, then enabled and started it.
func operatorKubelet(t *testing.T, sd *fakeSystemd) {
	t.Helper()
	replaceKubelet(t, sd.root)
	writeFile(t, filepath.Join(sd.root, "etc/systemd/system", kubeletUnit), readFile(t, filepath.Join(repo, "build/systemd/kubelet.service")))
	sd.systemctl(t, "daemon-reload")
	sd.systemctl(t, "enable", "--now", kubeletUnit)
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
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
//   - an install is the stock package's: disabled by the preset, and no
//     kubelet started or restarted, beside an operator's own running
//     kubelet.service too (then it says how to run critlet's);
//   - an upgrade does not restart the kubelet and says how to;
//   - a removal disables and stops the kubelet, whatever binary the
//     operator put at /usr/bin/kubelet;
//   - a swap-in (dnf install, rpm -U: Obsoletes; the stock package still
//     installed when critlet's %pre runs) puts back exactly the state %pre
//     noted before the stock package's %preun disabled and stopped the
//     kubelet: enabled stays enabled, disabled disabled, and a running
//     kubelet runs critlet's binary. A stock package removed in an earlier
//     transaction makes the install a fresh one;
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
	_, this := thisRelease(t)
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

	tb.step(t, "fresh install", disabledInactive, "", upgrade(this))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit) // the install guide's step
	tb.step(t, "upgrade", enabledRunning("critlet (replaced)"), restartHint, upgrade(next))
	installed(pkgName, pkg+"-2")
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove", unitState{}, startHint, erase(pkgName))
	tb.step(t, "install again", disabledInactive, "", upgrade(this))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit)
	replaceKubelet(t, r.Dir)
	tb.sd.systemctl(t, "restart", kubeletUnit)
	tb.step(t, "remove, /usr/bin/kubelet replaced by the operator's", unitState{}, startHint, erase(pkgName))

	tb.step(t, "stock package's install", disabledInactive, "", upgrade(stock, kubeadm))
	tb.sd.systemctl(t, "enable", "--now", kubeletUnit)
	edit := "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n"
	writeFile(t, r.Path("/etc/sysconfig/kubelet"), edit)
	tb.step(t, "swap-in: dnf install ./kubelet-critlet.rpm (obsoletes kubelet)", enabledRunning("critlet"), "started", upgrade(this))
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
	tb.step(t, "swap-in of a stock kubelet disabled and stopped", disabledInactive, "", upgrade(this))
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

	tb.sd.systemctl(t, "enable", "--now", kubeletUnit)
	tb.step(t, "stock package removed (dnf remove kubelet)", unitState{}, "", erase("kubelet"))
	tb.step(t, "install after the stock package's removal", disabledInactive, "", upgrade(this))

	if _, err := r.Erase(pkgName); err != nil {
		t.Fatal(err)
	}
	operatorKubelet(t, tb.sd)
	row := tb.step(t, "fresh install beside an operator's own running kubelet.service", disabledRunning("stock (replaced)"), restartHint,
		upgrade(this))
	if s := starts(row.calls); len(s) > 0 {
		t.Errorf(".rpm %s: the scripts started or restarted the operator's kubelet: systemctl %q", row.step, s)
	}

	t.Logf("the .rpm with the stock packages (systemd running, Fedora's and RHEL's preset policy):\n%s", tb.markdown())
}

// TestRPMSwapInImage: swapping in while building an image (no running
// systemd) keeps an enabled kubelet enabled, which the stock package's
// %preun alone would disable, and starts nothing.
func TestRPMSwapInImage(t *testing.T) {
	testenv.Need(t, "an rpm system root", scratchroot.CanChroot())
	stock, _ := stockRPMs(t)
	_, this := thisRelease(t)
	r, err := scratchroot.NewRPM(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tb := &swapTable{format: ".rpm, no running systemd", sd: installFakeSystemd(t, r.Dir, false, true), scratch: rpmScratch}
	tb.step(t, "stock package's install", disabledInactive, "", func() (string, error) { return r.Upgrade(stock) })
	tb.sd.systemctl(t, "enable", kubeletUnit)
	tb.step(t, "swap-in", enabledInactive, "", func() (string, error) { return r.Upgrade(this) })
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
	this, _ := thisRelease(t)
	tb := &swapTable{format: ".deb, no running systemd", sd: installFakeSystemd(t, r.Dir, false, false)}
	tb.step(t, "fresh install", enabledInactive, "", func() (string, error) { return r.Install(this) })
	tb.step(t, "remove", unitState{}, "", func() (string, error) { return r.Remove(pkgName) })
	for _, c := range tb.sd.calls(t) {
		if c != "--no-reload preset kubelet.service" && c != "--no-reload disable kubelet.service" {
			t.Errorf("without a running systemd the scripts ran systemctl %s", c)
		}
	}
	t.Logf("%s", tb.markdown())
}
