//go:build packagecheck

package packagetest

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// dirtySuffix runs version::dirty_suffix (hack/lib/version.sh) in dir.
func dirtySuffix(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, errOut, code := runEnv(t, nil, "bash", append([]string{"-c", `cd "$1" && shift && source "$0" && version::dirty_suffix "$@"`,
		filepath.Join(repo, "hack/lib/version.sh"), dir}, args...)...)
	if code != 0 {
		t.Fatalf("version::dirty_suffix %q: exit %d\n%s%s", args, code, out, errOut)
	}
	return strings.TrimSpace(out)
}

// TestDirtyVersionsSort: the mark of a build from a work tree with
// uncommitted changes names what is packaged (the same files give the same
// version, a changed file another) and sorts, for dpkg and for rpm, after
// the commit's own version, later for a later kubelet, and before the next
// commit's version.
func TestDirtyVersionsSort(t *testing.T) {
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet")
	writeFile(t, kubelet, "kubelet one")
	writeFile(t, filepath.Join(dir, "build/nfpm.yaml"), "name: x\n")
	writeFile(t, filepath.Join(dir, "README.md"), "readme\n")
	old := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	if err := os.Chtimes(kubelet, old, old); err != nil {
		t.Fatal(err)
	}
	first := dirtySuffix(t, dir, kubelet, "build", "README.md")
	if !regexp.MustCompile(`^\.dirty\.20261204100000\.[0-9a-f]{12}$`).MatchString(first) {
		t.Fatalf("dirty suffix %q, want .dirty.<kubelet's time>.<12 hex digits>", first)
	}
	if again := dirtySuffix(t, dir, kubelet, "build", "README.md"); again != first {
		t.Errorf("the same files gave %q, then %q", first, again)
	}
	writeFile(t, filepath.Join(dir, "README.md"), "readme, edited\n")
	edited := dirtySuffix(t, dir, kubelet, "build", "README.md")
	if edited == first {
		t.Errorf("an edited README.md kept the version's mark %q", first)
	}
	writeFile(t, kubelet, "kubelet two")
	later := old.Add(time.Hour)
	if err := os.Chtimes(kubelet, later, later); err != nil {
		t.Fatal(err)
	}
	rebuilt := dirtySuffix(t, dir, kubelet, "build", "README.md")

	commit := "1.37.2+critlet.20261204003609.3cbd3caf92b7"
	next := "1.37.2+critlet.20261205090000.0123456789ab"
	ordered := []string{commit, commit + first, commit + rebuilt, next}
	for i := 0; i+1 < len(ordered); i++ {
		a, b := ordered[i], ordered[i+1]
		if _, _, code := runBoth(t, "dpkg", "--compare-versions", a+"-1", "lt", b+"-1"); code != 0 {
			t.Errorf("dpkg sorts %s-1 after %s-1", a, b)
		}
		cmp := strings.TrimSpace(run(t, nil, "rpm", "--eval", `%{lua: print(rpm.vercmp("`+a+`", "`+b+`"))}`))
		if cmp != "-1" {
			t.Errorf("rpm sorts %s against %s: %s, want -1", a, b, cmp)
		}
	}
}

// TestDirtyTreePackageVersion: make package in a work tree with an
// uncommitted change names the packages for what they hold, not for the
// commit. It runs hack/release.sh in a copy of this work tree (a clone of
// the commit with the uncommitted changes laid over it) with a stand-in
// kubelet (the version is the point, not the kubelet) and README.md
// edited.
func TestDirtyTreePackageVersion(t *testing.T) {
	clone := filepath.Join(t.TempDir(), "critlet")
	run(t, nil, "git", "clone", "--quiet", "--shared", repo, clone)
	head := strings.TrimSpace(run(t, nil, "git", "rev-parse", "HEAD"))
	run(t, nil, "git", "-C", clone, "checkout", "--quiet", "--detach", head)
	changed := run(t, nil, "git", "ls-files", "-z", "--modified", "--others", "--exclude-standard")
	for _, p := range strings.Split(strings.TrimSuffix(changed, "\x00"), "\x00") {
		if p == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, p))
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Remove(filepath.Join(clone, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		case err != nil:
			t.Fatal(err)
		default:
			info, err := os.Stat(filepath.Join(repo, p))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(clone, p), string(data))
			if err := os.Chmod(filepath.Join(clone, p), info.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeFile(t, filepath.Join(clone, "_output/bin/kubelet"), "#!/bin/sh\necho Kubernetes v0.0.0\n")
	if err := os.Chmod(filepath.Join(clone, "_output/bin/kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(clone, "README.md"), readFile(t, filepath.Join(clone, "README.md"))+"\nAn uncommitted line.\n")
	out := t.TempDir()
	run(t, nil, filepath.Join(clone, "hack/release.sh"), "package", out)

	upstream, err := upstreamVersion()
	if err != nil {
		t.Fatal(err)
	}
	stamp := strings.TrimSpace(run(t, []string{"TZ=UTC"}, "git", "show", "-s", "--date=format-local:%Y%m%d%H%M%S", "--format=%cd", "HEAD"))
	want := upstream + "+critlet." + stamp + "." + head[:12] +
		dirtySuffix(t, clone, filepath.Join(clone, "_output/bin/kubelet"), filepath.Join(clone, "_output/release-licenses", runtime.GOARCH),
			"build", "LICENSE", "README.md")
	if !strings.Contains(want, ".dirty.") {
		t.Fatalf("want %q to be marked dirty", want)
	}
	d := only(t, out, pkgName+"_*_"+runtime.GOARCH+".deb")
	if got := strings.TrimSpace(run(t, nil, "dpkg-deb", "--field", d, "Version")); got != want+"-1" {
		t.Errorf(".deb version %q, want %q", got, want+"-1")
	}
	r := only(t, out, pkgName+"-*."+rpmArch+".rpm")
	if got := run(t, nil, "rpm", "--dbpath", t.TempDir(), "-qp", "--qf", "%{VERSION}", r); got != want {
		t.Errorf(".rpm version %q, want %q", got, want)
	}
}
