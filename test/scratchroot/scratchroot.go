// Package scratchroot installs Debian packages into a directory of their
// own with the host's dpkg (--root), so that a package can be installed,
// upgraded, removed and purged in tests without touching the host's files
// or its package database.
//
// Install ignores unmet dependencies (the root holds no other packages);
// InstallChecked requires them met inside the root. In a root New makes,
// maintainer scripts run outside a chroot with DPKG_ROOT set
// (--force-script-chrootless), which critlet's scripts honour by leaving
// the host alone. A root NewSystem makes stands in for a Debian system,
// and its scripts run chrooted in it, as dpkg runs them on that system;
// NewRPM makes such a root for rpm.
package scratchroot

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Root is a scratch root with a dpkg database.
type Root struct {
	Dir string
	// Env is added to dpkg's environment, and so to the maintainer
	// scripts'.
	Env []string
	// chroot: the scripts run chrooted in Dir (NewSystem).
	chroot bool
}

// New makes the dpkg database of an empty system under dir.
func New(dir string) (*Root, error) {
	if err := makeDpkgDB(dir); err != nil {
		return nil, err
	}
	return &Root{Dir: dir}, nil
}

func makeDpkgDB(dir string) error {
	admin := filepath.Join(dir, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
	}
	for _, f := range []string{"status", "available"} {
		if err := os.WriteFile(filepath.Join(admin, f), nil, 0o644); err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
	}
	return nil
}

// BasePackage owns, in a NewSystem root, the merged-/usr aliases /bin,
// /sbin and /lib, as a real system's packages do: dpkg removes a directory
// (even an alias) with the last package that ships it, and packages do ship
// /lib/systemd/system.
const BasePackage = "scratchroot-base"

// NewSystem makes under dir a scratch root that stands in for a merged-/usr
// Debian system: busybox's shell and tools, dpkg-query for maintainer
// scripts that ask dpkg, and BasePackage installed. dpkg runs maintainer
// scripts chrooted in it, as it runs them on that system (DPKG_ROOT
// empty); that needs root (CanChroot).
func NewSystem(dir string) (*Root, error) {
	if err := makeSystem(dir); err != nil {
		return nil, err
	}
	dpkgQuery, err := exec.LookPath("dpkg-query")
	if err != nil {
		return nil, fmt.Errorf("scratch root: %w", err)
	}
	if err := copyFromHost(dir, dpkgQuery); err != nil {
		return nil, err
	}
	if err := makeDpkgDB(dir); err != nil {
		return nil, err
	}
	r := &Root{Dir: dir, chroot: true}
	base, err := os.MkdirTemp("", "scratchroot-base")
	if err != nil {
		return nil, fmt.Errorf("scratch root: %w", err)
	}
	defer os.RemoveAll(base)
	control := "Package: " + BasePackage + "\nVersion: 1\nArchitecture: all\nMaintainer: scratchroot <scratchroot@critlet.io>\n" +
		"Description: the merged-/usr aliases of a scratch root\n"
	for _, d := range []string{"DEBIAN", "bin", "sbin", "lib"} {
		if err := os.MkdirAll(filepath.Join(base, "pkg", d), 0o755); err != nil {
			return nil, fmt.Errorf("scratch root: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "pkg/DEBIAN/control"), []byte(control), 0o644); err != nil {
		return nil, fmt.Errorf("scratch root: %w", err)
	}
	deb := filepath.Join(base, "base.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", filepath.Join(base, "pkg"), deb).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scratch root: dpkg-deb: %w\n%s", err, out)
	}
	if _, err := r.InstallChecked(deb); err != nil {
		return nil, err
	}
	return r, nil
}

// Path is p (absolute, as on the installed system) inside the root.
func (r *Root) Path(p string) string { return filepath.Join(r.Dir, p) }

// dpkg runs dpkg on the root and returns its combined output.
func (r *Root) dpkg(args ...string) (string, error) {
	return r.dpkgWith([]string{"--force-depends"}, args...)
}

func (r *Root) dpkgWith(force []string, args ...string) (string, error) {
	all := []string{"--root=" + r.Dir, "--log=" + r.Path("var/log/dpkg.log")}
	if !r.chroot {
		all = append(all, "--force-not-root", "--force-script-chrootless")
	}
	all = append(append(all, force...), args...)
	if err := os.MkdirAll(r.Path("var/log"), 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("dpkg", all...)
	// No terminal: a changed configuration file keeps the installed copy
	// (dpkg's default answer), as an unattended upgrade does.
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if r.chroot {
		// The scripts' PATH, inside the root.
		cmd.Env = append(cmd.Env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	}
	cmd.Env = append(cmd.Env, r.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("dpkg %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Install installs (or upgrades to) the .deb files, keeping edited
// configuration files.
func (r *Root) Install(debs ...string) (string, error) {
	return r.dpkg(append([]string{"--force-confold", "--install"}, debs...)...)
}

// InstallChecked installs the .deb files only if their dependencies are met
// by packages installed in the root.
func (r *Root) InstallChecked(debs ...string) (string, error) {
	return r.dpkgWith(nil, append([]string{"--force-confold", "--install"}, debs...)...)
}

// Remove removes a package and keeps its configuration files.
func (r *Root) Remove(pkg string) (string, error) { return r.dpkg("--remove", pkg) }

// Purge removes a package and its configuration files.
func (r *Root) Purge(pkg string) (string, error) { return r.dpkg("--purge", pkg) }

// State is the package's state in the root: "installed", "config-files"
// (removed, configuration kept), another dpkg state word, or "" when the
// root has no trace of it; and its version.
func (r *Root) State(pkg string) (state, version string, err error) {
	status, version, err := r.Status(pkg)
	if err != nil {
		return "", "", err
	}
	if f := strings.Fields(status); len(f) == 3 && f[2] != "not-installed" {
		state = f[2]
	}
	return state, version, nil
}

// Status is the package's dpkg status ("install ok installed",
// "deinstall ok config-files", …) and version, or "" when the root has
// never had it.
func (r *Root) Status(pkg string) (status, version string, err error) {
	out, err := exec.Command("dpkg-query", "--admindir="+r.Path("var/lib/dpkg"),
		"--show", "--showformat=${Status}\t${Version}", pkg).Output()
	if err != nil {
		if _, ok := err.(*exec.ExitError); ok {
			return "", "", nil
		}
		return "", "", fmt.Errorf("dpkg-query %s: %w", pkg, err)
	}
	status, version, _ = strings.Cut(string(out), "\t")
	return status, version, nil
}
