//go:build e2enode

package e2enode

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/critlet/critlet/test/scratchroot"
	"github.com/critlet/critlet/test/systemdunit"
)

var packageDir = flag.String("package-dir", "../../_output/package", "where make package put critlet's .deb")

// The kubelet as critlet's .deb installs it on a kubeadm node and systemd
// starts it: the package goes into a scratch root beside kubeadm's drop-in
// and a node's environment files, the command line and environment are
// computed from the units as systemd computes them, and that command runs
// against the node. An operator's settings in /etc/default/critlet (the
// priority policy) and /etc/default/kubelet (a critlet flag in
// KUBELET_EXTRA_ARGS) must be in force: in the settings line, and in the
// victims (scenario 10's pods).
func TestInstalledFromPackage(t *testing.T) {
	k, argv := packagedKubelet(t)
	runScenario(t, "12 installed from the .deb", scenarioOptions{critletOnly: []kubeletUnderTest{k}}, func(e *env) {
		e.note("systemd would run %s", strings.Join(argv, " "))
		e.expectSettingsLogged("--critical-preemption-policy=priority", "--critical-preemption-parallelism=3")
		e.priorityPolicy(true)
	})
}

// packagedKubelet installs the .deb and returns the kubelet systemd would
// start, with the root's files standing in for the host's: an argument
// naming a file that exists in the scratch root is given the root's path.
// It also returns the command line as systemd would run it.
func packagedKubelet(t *testing.T) (kubeletUnderTest, []string) {
	t.Helper()
	debs, err := filepath.Glob(filepath.Join(*packageDir, "kubelet-critlet_*_"+runtime.GOARCH+".deb"))
	if err != nil || len(debs) != 1 {
		t.Fatalf("want one kubelet-critlet .deb in %s (make package), found %v %v", *packageDir, debs, err)
	}
	r, err := scratchroot.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := r.Install(debs[0]); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	kubeadm, err := os.ReadFile("../package/testdata/10-kubeadm.conf")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(suite.KubeletKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	config, err := suite.KubeletConfiguration(0)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(r.Path("/etc/default/critlet"))
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{
		// kubeadm's package, and what kubeadm join writes.
		"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": string(kubeadm),
		"/etc/kubernetes/kubelet.conf":                              string(kubeconfig),
		"/var/lib/kubelet/config.yaml":                              string(config),
		"/var/lib/kubelet/kubeadm-flags.env":                        `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=` + suite.Config().CRIEndpoint() + `"` + "\n",
		// The operator's edits.
		"/etc/default/kubelet": "KUBELET_EXTRA_ARGS=--critical-preemption-parallelism=3\n",
		"/etc/default/critlet": string(shipped) + "CRITLET_PREEMPTION_POLICY=priority\n",
	} {
		if err := os.MkdirAll(filepath.Dir(r.Path(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.Path(path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd, err := systemdunit.Resolve(r.Dir, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Path != "/usr/bin/kubelet" {
		t.Fatalf("systemd would run %s, not the package's /usr/bin/kubelet", cmd.Path)
	}
	var flags []string
	for _, a := range cmd.Argv[1:] {
		if name, path, ok := strings.Cut(a, "="); ok && filepath.IsAbs(path) {
			if _, err := os.Stat(r.Path(path)); err == nil {
				a = name + "=" + r.Path(path)
			}
		}
		flags = append(flags, a)
	}
	return kubeletUnderTest{name: "critlet from its .deb", binary: r.Path(cmd.Path), flags: flags, env: cmd.Env}, cmd.Argv
}
