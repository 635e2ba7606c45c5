//go:build packagecheck

package packagetest

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestDebControl reads the .deb's control fields and conffiles with dpkg-deb.
func TestDebControl(t *testing.T) {
	d := deb(t)
	upstream, _, pkg := versions(t)
	want := map[string]string{
		"Package":      pkgName,
		"Version":      pkg + "-1",
		"Architecture": runtime.GOARCH,
		"Provides":     "kubelet (= " + upstream + ")",
		"Conflicts":    "kubelet",
		"Replaces":     "kubelet",
		"Depends":      "kubernetes-cni (>= 1.2.0), mount, util-linux",
		"Recommends":   "iptables (>= 1.8.4)",
		"Section":      "net",
	}
	for field, w := range want {
		if got := strings.TrimSpace(run(t, nil, "dpkg-deb", "--field", d, field)); got != w {
			t.Errorf("%s: %s = %q, want %q", filepath.Base(d), field, got, w)
		}
	}
	conffiles := strings.Fields(run(t, nil, "dpkg-deb", "--info", d, "conffiles"))
	if w := []string{"/etc/default/critlet", "/etc/default/kubelet"}; !slices.Equal(sortedCopy(conffiles), w) {
		t.Errorf("conffiles %q, want %q", conffiles, w)
	}
	// The scripts' behaviour is the swap tables'; here, that the package
	// carries them as they are in build/scripts/deb, and no other.
	for _, script := range []string{"preinst", "postinst", "prerm", "postrm"} {
		want, err := os.ReadFile(filepath.Join(repo, "build/scripts/deb", script))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		body, stderr, code := runBoth(t, "dpkg-deb", "--info", d, script)
		switch {
		case want == nil && code == 0:
			t.Errorf("the package has a %s, and build/scripts/deb none:\n%s", script, body)
		case want != nil && (code != 0 || body != string(want)):
			t.Errorf("the package's %s is not build/scripts/deb/%s (dpkg-deb exit %d %s):\n%s", script, script, code, stderr, body)
		}
	}
	t.Logf("%s: %s", filepath.Base(d), run(t, nil, "dpkg-deb", "--field", d))
}

func sortedCopy(s []string) []string { c := slices.Clone(s); slices.Sort(c); return c }

// entry is one file of a package: its type and mode as ls shows them,
// its owner, and its path.
type entry struct{ mode, owner string }

// The files every package installs (beside the third-party notices), by
// format: dpkg-deb and rpm list them with mode and owner.
func wantFiles(format string) map[string]entry {
	dir := entry{"drwxr-xr-x", "root/root"}
	file := entry{"-rw-r--r--", "root/root"}
	settings := "/etc/default/"
	if format == "rpm" {
		settings = "/etc/sysconfig/"
	}
	// Each format's kubelet package's unit directory (build/nfpm.yaml).
	units := "/lib/systemd/system/"
	if format == "rpm" {
		units = "/usr/lib/systemd/system/"
	}
	return map[string]entry{
		"/usr/bin/kubelet":                           {"-rwxr-xr-x", "root/root"},
		units + "kubelet.service":                    file,
		units + "kubelet.service.d":                  dir,
		units + "kubelet.service.d/20-critlet.conf":  file,
		settings + "kubelet":                         file,
		settings + "critlet":                         file,
		"/var/lib/kubelet":                           dir,
		"/etc/kubernetes/manifests":                  dir,
		"/usr/share/doc/kubelet-critlet/LICENSE":     file,
		"/usr/share/doc/kubelet-critlet/README.md":   file,
		"/usr/share/doc/kubelet-critlet/third_party": dir,
	}
}

const notices = "/usr/share/doc/kubelet-critlet/third_party/"

// TestDebFiles lists the .deb's files with dpkg-deb: the stock package's
// paths, modes and owners, and nothing owned by anyone but root.
func TestDebFiles(t *testing.T) {
	got := map[string]entry{}
	var thirdParty []string
	sc := bufio.NewScanner(strings.NewReader(run(t, nil, "dpkg-deb", "--contents", deb(t))))
	for sc.Scan() {
		// drwxr-xr-x root/root 0 2026-12-03 16:24 ./etc/
		f := strings.Fields(sc.Text())
		if len(f) != 6 {
			t.Fatalf("unexpected dpkg-deb line %q", sc.Text())
		}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if f[1] != "root/root" {
			t.Errorf("%s is owned by %s", path, f[1])
		}
		if rest, ok := strings.CutPrefix(path, notices); ok {
			if f[0][0] == '-' {
				thirdParty = append(thirdParty, rest)
			}
			continue
		}
		got[path] = entry{f[0], f[1]}
	}
	checkFiles(t, "deb", got)
	checkNotices(t, thirdParty)
}

// checkFiles compares a package's files with wantFiles, ignoring the
// parent directories packagers add.
func checkFiles(t *testing.T, format string, got map[string]entry) {
	t.Helper()
	want := wantFiles(format)
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s is missing", format, p)
		} else if g != w {
			t.Errorf("%s: %s is %v, want %v", format, p, g, w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; ok {
			continue
		}
		if g.mode[0] != 'd' || !slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(w string) bool { return strings.HasPrefix(w, p+"/") }) {
			t.Errorf("%s: unexpected %s %v", format, p, g)
		}
	}
}

// checkNotices: every module linked into the kubelet (go version -m) has
// its license among the notices, as go-licenses saved them.
func checkNotices(t *testing.T, files []string) {
	t.Helper()
	var licenses []string
	for _, f := range files {
		base := strings.ToUpper(filepath.Base(f))
		if strings.HasPrefix(base, "LICENSE") || strings.HasPrefix(base, "COPYING") || strings.HasPrefix(base, "LICENCE") {
			licenses = append(licenses, filepath.Dir(f))
		}
	}
	sc := bufio.NewScanner(strings.NewReader(run(t, nil, "go", "version", "-m", patchedBin)))
	modules := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "dep" {
			continue
		}
		modules++
		mod := f[1]
		if !slices.ContainsFunc(licenses, func(d string) bool { return d == mod || strings.HasPrefix(d, mod+"/") || strings.HasPrefix(mod, d+"/") }) {
			t.Errorf("no license among the notices for %s, linked into the kubelet", mod)
		}
	}
	if modules < 50 {
		t.Fatalf("go version -m listed %d modules of the kubelet; it links far more", modules)
	}
	t.Logf("%d license files cover the %d modules linked into the kubelet", len(licenses), modules)
}

// TestRPM reads the .rpm with rpm, as an rpm-based host does.
func TestRPM(t *testing.T) {
	r := rpm(t)
	db := t.TempDir()
	q := func(args ...string) string {
		return run(t, nil, "rpm", append([]string{"--dbpath", db, "-qp", r}, args...)...)
	}
	upstream, _, pkg := versions(t)
	if got, want := q("--qf", "%{NAME}|%{VERSION}|%{RELEASE}|%{ARCH}|%{LICENSE}|%{BUILDHOST}"),
		fmt.Sprintf("%s|%s|1|%s|Apache-2.0|critlet", pkgName, pkg, rpmArch); got != want {
		t.Errorf("rpm header %q, want %q", got, want)
	}
	lines := func(s string) []string { return sortedCopy(strings.Split(strings.TrimSpace(s), "\n")) }
	for query, want := range map[string][]string{
		"--provides":   {"kubelet = " + upstream, fmt.Sprintf("%s = %s-1", pkgName, pkg)},
		"--conflicts":  {"kubelet"},
		"--obsoletes":  {"kubelet"},
		"--recommends": {"iptables >= 1.8.4"},
	} {
		if got := lines(q(query)); !slices.Equal(got, sortedCopy(want)) {
			t.Errorf("rpm %s: %q, want %q", query, got, sortedCopy(want))
		}
	}
	requires := lines(q("--requires"))
	for _, w := range []string{"kubernetes-cni >= 1.2.0", "util-linux"} {
		if !slices.Contains(requires, w) {
			t.Errorf("rpm --requires %q lacks %q", requires, w)
		}
	}
	if got, w := lines(q("--configfiles")), []string{"/etc/sysconfig/critlet", "/etc/sysconfig/kubelet"}; !slices.Equal(got, w) {
		t.Errorf("rpm --configfiles %q, want %q", got, w)
	}
	for tag, file := range map[string]string{"PREIN": "pre", "POSTIN": "post", "PREUN": "preun", "POSTUN": "postun", "POSTTRANS": "posttrans"} {
		want := strings.TrimSuffix(readFile(t, filepath.Join(repo, "build/scripts/rpm", file)), "\n")
		if got := q("--qf", "%{"+tag+"}"); strings.TrimSuffix(got, "\n") != want {
			t.Errorf("the package's %%%s is not build/scripts/rpm/%s:\n%s", strings.ToLower(tag), file, got)
		}
	}

	// --dump: path size mtime digest mode owner group isconfig isdoc rdev symlink
	got := map[string]entry{}
	var thirdParty []string
	noreplace := q("--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]")
	for _, l := range strings.Split(strings.TrimSpace(q("--dump")), "\n") {
		f := strings.Fields(l)
		if len(f) < 11 {
			t.Fatalf("unexpected rpm --dump line %q", l)
		}
		path, owner := f[0], f[5]+"/"+f[6]
		if owner != "root/root" {
			t.Errorf("%s is owned by %s", path, owner)
		}
		if rest, ok := strings.CutPrefix(path, notices); ok {
			thirdParty = append(thirdParty, rest)
			continue
		}
		var mode os.FileMode
		if _, err := fmt.Sscanf(f[4], "%o", &mode); err != nil {
			t.Fatalf("mode of %s: %v", path, err)
		}
		got[path] = entry{lsMode(mode), owner}
	}
	checkFiles(t, "rpm", got)
	checkNotices(t, thirdParty)
	for _, f := range []string{"/etc/sysconfig/critlet", "/etc/sysconfig/kubelet"} {
		if !strings.Contains(noreplace, f+" cn") {
			t.Errorf("%s is not %%config(noreplace): %s", f, noreplace)
		}
	}
}

// lsMode renders an rpm mode (type bits included) as ls does.
func lsMode(m os.FileMode) string {
	perm := os.FileMode(m & 0o777)
	if m&0o170000 == 0o040000 {
		return (perm | os.ModeDir).String()
	}
	return perm.String()
}
