//go:build packagecheck

package packagetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The packages make package built, and what they must report.
var (
	packageDir = filepath.Join(repo, "_output/package")
	patchedBin = filepath.Join(repo, "_output/bin/kubelet")
	stockBin   = filepath.Join(repo, "_output/bin/kubelet-stock")
	nfpmBin    = filepath.Join(repo, "_output/bin/nfpm")
)

const pkgName = "kubelet-critlet"

// rpmArch is rpm's name for this machine's architecture.
var rpmArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]

// only returns the single file matching pattern in dir.
func only(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) != 1 {
		t.Fatalf("want exactly one %s in %s (make package), found %v %v", pattern, dir, m, err)
	}
	return m[0]
}

func deb(t *testing.T) string { return only(t, packageDir, pkgName+"_*_"+runtime.GOARCH+".deb") }
func rpm(t *testing.T) string { return only(t, packageDir, pkgName+"-*."+rpmArch+".rpm") }

// run runs a command in the repository and returns its standard output;
// a failure fails the test with its standard error.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, errOut, code := runEnv(t, env, name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s%s", name, strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// runBoth runs a command and returns its output and exit status.
func runBoth(t *testing.T, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runEnv(t, nil, name, args...)
}

func runEnv(t *testing.T, env []string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running %s: %v", name, err)
	}
	return out.String(), errb.String(), code
}

// runErr runs a command in the repository, for builds that report their
// failure rather than fail a test.
func runErr(env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// upstreamVersion is the upstream release go.mod pins, without the v.
func upstreamVersion() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), nil
}

// versions: the upstream release go.mod pins (without v), the kubelet's
// version string, and the packages' version (without the revision): the
// commit's, and from a work tree with uncommitted changes the mark of the
// packaged files that hack/lib/version.sh gives them.
func versions(t *testing.T) (upstream, kubelet, pkg string) {
	t.Helper()
	upstream, err := upstreamVersion()
	if err != nil {
		t.Fatal(err)
	}
	kubelet = strings.TrimPrefix(strings.TrimSpace(run(t, nil, patchedBin, "--version")), "Kubernetes v")
	head := strings.TrimSpace(run(t, nil, "git", "rev-parse", "HEAD"))
	stamp := strings.TrimSpace(run(t, []string{"TZ=UTC"}, "git", "show", "-s", "--date=format-local:%Y%m%d%H%M%S", "--format=%cd", "HEAD"))
	pkg = upstream + "+critlet." + stamp + "." + head[:12]
	if strings.TrimSpace(run(t, nil, "git", "status", "--porcelain")) != "" {
		pkg += strings.TrimSpace(run(t, nil, "bash", "-c", `source hack/lib/version.sh && version::dirty_suffix "$@"`, "-",
			patchedBin, filepath.Join(repo, "_output/release-licenses", runtime.GOARCH), "build", "LICENSE", "README.md"))
	}
	return upstream, kubelet, pkg
}

// sameFile fails unless a and b hold the same bytes.
func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s and %s differ", a, b)
	}
}
