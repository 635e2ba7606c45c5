package scratchroot

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/test/testenv"
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

// TestSystemRunsScriptsChrooted: in a NewSystem root the maintainer
// scripts run chrooted (they see the root as /, DPKG_ROOT empty) with
// dpkg-query working, and removing a package that ships /lib keeps the
// merged-/usr alias.
func TestSystemRunsScriptsChrooted(t *testing.T) {
	testenv.Need(t, "a system root", CanChroot())
	r, err := NewSystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"DEBIAN/control":  "Package: demo\nVersion: 1\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: demo\n",
		"DEBIAN/postinst": "#!/bin/sh\nset -e\necho \"root=${DPKG_ROOT:-/} base=$(dpkg-query -W -f='${db:Status-Status}' " + BasePackage + ")\" >/postinst.out\n",
		"lib/demo/file":   "demo\n",
	}
	for p, c := range files {
		full := filepath.Join(dir, "pkg", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "demo.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "pkg"), deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	if _, err := r.InstallChecked(deb); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(r.Path("/postinst.out")); string(got) != "root=/ base=installed\n" {
		t.Errorf("the postinst saw %q, want it chrooted with dpkg-query answering", got)
	}
	if _, err := os.Stat(r.Path("/usr/lib/demo/file")); err != nil {
		t.Errorf("/lib/demo/file is not under /usr/lib: %v", err)
	}
	if _, err := r.Remove("demo"); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(r.Path("/lib")); err != nil || target != "usr/lib" {
		t.Errorf("after the removal /lib is %q (%v), want the alias of usr/lib", target, err)
	}
}

// TestRPMRoot: rpm installs, upgrades and erases in an RPMRoot, running
// the scriptlets chrooted with their arguments.
func TestRPMRoot(t *testing.T) {
	testenv.Need(t, "a system root", CanChroot())
	_, err := exec.LookPath("rpmbuild")
	testenv.Need(t, "rpmbuild", err)
	r, err := NewRPM(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	build := func(version string) string {
		spec := filepath.Join(top, "demo-"+version+".spec")
		body := "Name: demo\nVersion: " + version + "\nRelease: 1\nSummary: demo\nLicense: none\nBuildArch: noarch\n" +
			"%description\ndemo\n%install\nmkdir -p %{buildroot}/usr/share/demo\necho " + version + " >%{buildroot}/usr/share/demo/file\n" +
			"%files\n/usr/share/demo/file\n" +
			"%post\necho \"post " + version + " $1\" >>/scriptlets\n%preun\necho \"preun " + version + " $1\" >>/scriptlets\n"
		if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("rpmbuild", "--quiet", "--define", "_topdir "+top, "-bb", spec).CombinedOutput(); err != nil {
			t.Fatalf("rpmbuild: %v\n%s", err, out)
		}
		return filepath.Join(top, "RPMS/noarch/demo-"+version+"-1.noarch.rpm")
	}
	if _, err := r.Upgrade(build("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Upgrade(build("2")); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Version("demo"); err != nil || v != "2-1" {
		t.Errorf("installed version %q (%v), want 2-1", v, err)
	}
	if _, err := r.Erase("demo"); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Version("demo"); err != nil || v != "" {
		t.Errorf("after the erase: version %q (%v), want none", v, err)
	}
	got, _ := os.ReadFile(r.Path("/scriptlets"))
	if want := "post 1 1\npost 2 2\npreun 1 1\npreun 2 0\n"; string(got) != want {
		t.Errorf("scriptlets ran as\n%s\nwant\n%s", got, want)
	}
}

// TestRPMScriptletsQuery: a scriptlet's rpm -q reads the root's database
// in the middle of the transaction: a package obsoleting another sees it
// still installed from its %pre (rpm -U erases it later), and sees a
// package installed before its own removal from its %preun.
func TestRPMScriptletsQuery(t *testing.T) {
	testenv.Need(t, "a system root", CanChroot())
	_, err := exec.LookPath("rpmbuild")
	testenv.Need(t, "rpmbuild", err)
	r, err := NewRPM(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	query := `$(if rpm -q --quiet old; then echo old; else echo none; fi)`
	build := func(name, header string) string {
		spec := filepath.Join(top, name+".spec")
		body := "Name: " + name + "\nVersion: 1\nRelease: 1\nSummary: demo\nLicense: none\nBuildArch: noarch\n" + header +
			"%description\ndemo\n%install\nmkdir -p %{buildroot}/usr/share/" + name + "\necho " + name + " >%{buildroot}/usr/share/" + name + "/file\n" +
			"%files\n/usr/share/" + name + "/file\n" +
			"%pre\necho \"" + name + " pre $1 " + query + "\" >>/scriptlets\n" +
			"%preun\necho \"" + name + " preun $1 " + query + "\" >>/scriptlets\n"
		if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("rpmbuild", "--quiet", "--define", "_topdir "+top, "-bb", spec).CombinedOutput(); err != nil {
			t.Fatalf("rpmbuild %s: %v\n%s", name, err, out)
		}
		return filepath.Join(top, "RPMS/noarch/"+name+"-1-1.noarch.rpm")
	}
	old, replacing := build("old", ""), build("new", "Obsoletes: old\n")
	for _, step := range []func() (string, error){
		func() (string, error) { return r.Upgrade(old) },
		func() (string, error) { return r.Upgrade(replacing) },
		func() (string, error) { return r.InstallBeside(old) },
		func() (string, error) { return r.Erase("new") },
	} {
		if out, err := step(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	got, _ := os.ReadFile(r.Path("/scriptlets"))
	want := "old pre 1 none\nnew pre 1 old\nold preun 0 old\nold pre 1 none\nnew preun 0 old\n"
	if string(got) != want {
		t.Errorf("scriptlets ran as\n%s\nwant\n%s", got, want)
	}
}

// TestCopyHostPackage: a system root given the host's perl-base and
// init-system-helpers runs Debian's deb-systemd-invoke chrooted, which
// asks /usr/sbin/policy-rc.d before it calls systemctl to start a unit.
func TestCopyHostPackage(t *testing.T) {
	testenv.Need(t, "a system root", CanChroot())
	_, err := exec.LookPath("deb-systemd-invoke")
	testenv.Need(t, "Debian's deb-systemd-invoke", err)
	dir := t.TempDir()
	if err := makeSystem(dir); err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"perl-base", "init-system-helpers"} {
		if err := CopyHostPackage(dir, pkg); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A systemctl that records its calls, with demo.service enabled.
	write("usr/bin/systemctl", "#!/bin/sh\necho \"$*\" >>/calls\ncase \"$*\" in *is-enabled*) echo enabled ;; esac\n")
	invoke := func() string {
		t.Helper()
		os.Remove(filepath.Join(dir, "calls"))
		cmd := exec.Command("chroot", dir, "/usr/bin/deb-systemd-invoke", "start", "demo.service")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deb-systemd-invoke: %v\n%s", err, out)
		}
		calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
		return string(calls)
	}
	if got := invoke(); !strings.Contains(got, "start demo.service") {
		t.Errorf("deb-systemd-invoke start called systemctl\n%s\nwant it to start demo.service", got)
	}
	write("usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n")
	if got := invoke(); got != "" {
		t.Errorf("under a policy-rc.d forbidding starts deb-systemd-invoke called systemctl\n%s", got)
	}
}
