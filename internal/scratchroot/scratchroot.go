// Package scratchroot installs Debian packages into a directory of their
// own with the host's dpkg (--root), so that a package can be installed,
// upgraded, removed and purged in tests without touching the host's files
// or its package database.
//
// Install ignores unmet dependencies (the root holds no other packages);
// InstallChecked requires them met inside the root. Maintainer scripts run outside a chroot with DPKG_ROOT set
// (--force-script-chrootless), which critlet's scripts honour by doing
// nothing.
package scratchroot

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Root is a scratch root with an empty dpkg database.
type Root struct{ Dir string }

// New makes the dpkg database of an empty system under dir.
func New(dir string) (*Root, error) {
	admin := filepath.Join(dir, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			return nil, fmt.Errorf("scratch root: %w", err)
		}
	}
	for _, f := range []string{"status", "available"} {
		if err := os.WriteFile(filepath.Join(admin, f), nil, 0o644); err != nil {
			return nil, fmt.Errorf("scratch root: %w", err)
		}
	}
	return &Root{Dir: dir}, nil
}

// Path is p (absolute, as on the installed system) inside the root.
func (r *Root) Path(p string) string { return filepath.Join(r.Dir, p) }

// dpkg runs dpkg on the root and returns its combined output.
func (r *Root) dpkg(args ...string) (string, error) {
	return r.dpkgWith([]string{"--force-depends"}, args...)
}

func (r *Root) dpkgWith(force []string, args ...string) (string, error) {
	all := append([]string{"--root=" + r.Dir, "--force-not-root", "--force-script-chrootless",
		"--log=" + r.Path("var/log/dpkg.log")}, force...)
	all = append(all, args...)
	if err := os.MkdirAll(r.Path("var/log"), 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("dpkg", all...)
	// No terminal: a changed configuration file keeps the installed copy
	// (dpkg's default answer), as an unattended upgrade does.
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
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
