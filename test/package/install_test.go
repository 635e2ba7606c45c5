//go:build packagecheck

package packagetest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/critlet/critlet/test/scratchroot"
	"github.com/critlet/critlet/test/systemdunit"
)

// newRoot is an empty scratch root.
func newRoot(t *testing.T) *scratchroot.Root {
	t.Helper()
	r, err := scratchroot.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustInstall(t *testing.T, r *scratchroot.Root, debs ...string) {
	t.Helper()
	out, err := r.Install(debs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dpkg --install %s:\n%s", strings.Join(debs, " "), out)
}

// wantState checks a package's state in the root (installed,
// config-files, or "" when the root has no trace of it), and its version
// when one is given.
func wantState(t *testing.T, r *scratchroot.Root, pkg, state, version string) {
	t.Helper()
	got, v, err := r.State(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if got != state || (version != "" && v != version) {
		t.Errorf("%s: state %q version %q, want state %q version %q", pkg, got, v, state, version)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

// kubeadmDropIn installs kubeadm's drop-in as kubeadm's .deb does.
func kubeadmDropIn(t *testing.T, r *scratchroot.Root) {
	t.Helper()
	writeFile(t, r.Path("/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"), readFile(t, "testdata/10-kubeadm.conf"))
}

// TestSystemdCommandBesideKubeadm installs the .deb with kubeadm's drop-in
// and a kubeadm-joined node's environment files, has systemd-analyze verify
// the units, and computes the command systemd would start.
func TestSystemdCommandBesideKubeadm(t *testing.T) {
	r := newRoot(t)
	mustInstall(t, r, deb(t))
	wantState(t, r, pkgName, "installed", "")
	sameFile(t, r.Path("/usr/bin/kubelet"), patchedBin)
	kubeadmDropIn(t, r)
	writeFile(t, r.Path("/var/lib/kubelet/kubeadm-flags.env"),
		`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"`+"\n")
	writeFile(t, r.Path("/etc/default/kubelet"), "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7\n")
	writeFile(t, r.Path("/etc/default/critlet"), readFile(t, r.Path("/etc/default/critlet"))+"CRITLET_PREEMPTION_POLICY=priority\n")

	verifyUnits(t, r)
	got, err := systemdunit.Resolve(r.Dir, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"/usr/bin/kubelet",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
		"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--node-ip=10.0.0.7"}
	if !reflect.DeepEqual(got.Argv, wantArgv) {
		t.Errorf("command line\n %q\nwant\n %q", got.Argv, wantArgv)
	}
	if w := []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/default/critlet"}; !reflect.DeepEqual(got.EnvironmentFiles, w) {
		t.Errorf("environment files %q, want %q", got.EnvironmentFiles, w)
	}
	var critlet []string
	for _, e := range got.Env {
		if strings.HasPrefix(e, "CRITLET_") {
			critlet = append(critlet, e)
		}
	}
	if w := []string{"CRITLET_PREEMPTION_POLICY=priority"}; !reflect.DeepEqual(critlet, w) {
		t.Errorf("critlet's variables %q, want %q", critlet, w)
	}
	t.Logf("systemd would run: %s\nwith %q", strings.Join(got.Argv, " "), got.Env)
}

// verifyUnits runs systemd-analyze verify on kubelet.service in the root,
// with the host's targets and slices copied in (the unit's default
// dependencies); any complaint fails.
func verifyUnits(t *testing.T, r *scratchroot.Root) {
	t.Helper()
	host, err := filepath.Glob("/usr/lib/systemd/system/*.target")
	if err != nil || len(host) == 0 {
		t.Fatalf("no systemd targets on this host (%v): install Debian's systemd", err)
	}
	slices, _ := filepath.Glob("/usr/lib/systemd/system/*.slice")
	dir := r.Path("/lib/systemd/system")
	for _, f := range append(host, slices...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a dangling alias
		}
		writeFile(t, filepath.Join(dir, filepath.Base(f)), string(data))
	}
	// verify prints warnings (unknown keys, bad values) without failing.
	stdout, stderr, code := runBoth(t, "systemd-analyze", "verify", "--root="+r.Dir, "kubelet.service")
	if code != 0 || strings.TrimSpace(stdout+stderr) != "" {
		t.Errorf("systemd-analyze verify kubelet.service: exit %d\n%s%s", code, stdout, stderr)
	}
}
