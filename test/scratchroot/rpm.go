package scratchroot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RPMRoot is a scratch root that stands in for a merged-/usr rpm-based
// system (busybox's shell and tools, and rpm) with its own rpm database at
// /var/lib/rpm, as RHEL's. rpm runs the scriptlets chrooted in it, as it
// does with --root: that needs root (CanChroot); a scriptlet's rpm -q reads
// that database, in the middle of the transaction as on a real system.
// Dependencies are not checked (the root holds no other packages).
type RPMRoot struct {
	Dir string
	// Env is added to rpm's environment, and so to the scriptlets'.
	Env []string
}

// NewRPM makes an RPMRoot under dir.
func NewRPM(dir string) (*RPMRoot, error) {
	if _, err := exec.LookPath("rpm"); err != nil {
		return nil, fmt.Errorf("scratch root: %w (install rpm)", err)
	}
	if err := makeSystem(dir); err != nil {
		return nil, err
	}
	if err := installRPM(dir); err != nil {
		return nil, err
	}
	r := &RPMRoot{Dir: dir}
	if _, err := r.rpm("--initdb"); err != nil {
		return nil, err
	}
	return r, nil
}

// installRPM copies the host's rpm into the root with the configuration it
// reads at start (rpmrc, macros, popt aliases, this machine's platform
// macros). Debian's rpm keeps its database in the user's home; the root's
// /etc/rpm/macros puts it where RHEL's is, where the tests' rpm --dbpath
// writes it.
func installRPM(dir string) error {
	host, err := exec.LookPath("rpm")
	if err != nil {
		return fmt.Errorf("scratch root: %w (install rpm)", err)
	}
	if err := copyFromHost(dir, host); err != nil {
		return err
	}
	out, err := exec.Command(host, "--eval", "%{_rpmconfigdir}", "--eval", "%{_arch}").Output()
	if err != nil {
		return fmt.Errorf("scratch root: rpm --eval: %w", err)
	}
	configDir, arch, ok := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if !ok {
		return fmt.Errorf("scratch root: rpm --eval gave %q, want its configuration directory and architecture", out)
	}
	popt, err := filepath.Glob(filepath.Join(configDir, "rpmpopt-*"))
	if err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	for _, f := range append(popt, filepath.Join(configDir, "rpmrc"), filepath.Join(configDir, "macros"),
		filepath.Join(configDir, "platform", arch+"-linux", "macros")) {
		if err := copyPath(dir, f); err != nil {
			return fmt.Errorf("scratch root: copying rpm's %s: %w", f, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc/rpm"), 0o755); err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/rpm/macros"), []byte("%_dbpath /var/lib/rpm\n"), 0o644); err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	return nil
}

// Path is p (absolute, as on the installed system) inside the root.
func (r *RPMRoot) Path(p string) string { return filepath.Join(r.Dir, p) }

// rpm runs rpm on the root, its database at /var/lib/rpm inside it, and
// returns its combined output.
func (r *RPMRoot) rpm(args ...string) (string, error) {
	all := append([]string{"--root", r.Dir, "--dbpath", "/var/lib/rpm"}, args...)
	cmd := exec.Command("rpm", all...)
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), r.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	// Debian's rpm warns that it is not Debian's package manager.
	text := dropDebianWarning(out.String())
	if err != nil {
		return text, fmt.Errorf("rpm %s: %w\n%s", strings.Join(args, " "), err, text)
	}
	return text, nil
}

func dropDebianWarning(out string) string {
	var kept []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, "rpm: RPM should not be used directly") || strings.HasPrefix(l, "rpm: However assuming you know what you are doing") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "")
}

// Upgrade installs the packages, replacing older versions of them and the
// packages they obsolete (rpm -U, as dnf install does), and keeping edited
// configuration files.
func (r *RPMRoot) Upgrade(rpms ...string) (string, error) {
	return r.rpm(append([]string{"-U", "--nodeps"}, rpms...)...)
}

// InstallBeside installs the packages without removing any package,
// letting them replace files that installed packages own: the order in
// which dnf swap runs a package's install before another's removal, which
// the rpm command line has no other way to give.
func (r *RPMRoot) InstallBeside(rpms ...string) (string, error) {
	return r.rpm(append([]string{"-i", "--nodeps", "--replacefiles"}, rpms...)...)
}

// Erase removes the packages.
func (r *RPMRoot) Erase(pkgs ...string) (string, error) {
	return r.rpm(append([]string{"-e", "--nodeps"}, pkgs...)...)
}

// Version is the installed package's version-release, or "" when it is not
// installed.
func (r *RPMRoot) Version(pkg string) (string, error) {
	out, err := r.rpm("-q", "--qf", "%{VERSION}-%{RELEASE}", pkg)
	var exit *exec.ExitError
	if errors.As(err, &exit) && strings.Contains(out, "is not installed") {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}
