//go:build e2ekubeadm

package e2ekubeadm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeadm, run in the node, reaches no init system of the host's: the
// programs by which it detects one (systemctl for systemd, openrc) are
// hidden in every directory of the PATH it runs with, not only at
// systemctl's usual paths; and systemd's and the system bus's sockets are
// out of reach, /run/systemd and /run/dbus being the node's own, so that a
// systemctl found anyway restarts and stops nothing of the host's. The
// kubelet's resolver configuration, which /etc/resolv.conf may reach only
// through /run/systemd, is then the suite's copy.
func TestNodeHidesHostInitSystem(t *testing.T) {
	k := installed{name: "critlet", root: "/suite/root-critlet"}
	cfg := nodeConfig("/suite", k)
	for _, d := range []string{"/run/systemd", "/run/dbus"} {
		if !slices.Contains(cfg.PrivateDirs, d) {
			t.Errorf("%s is the host's in the node (private directories %q): a systemctl there reaches the host's systemd", d, cfg.PrivateDirs)
		}
	}
	path := k.kubeadmPath()
	for _, want := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/suite/root-critlet/usr/bin"} {
		if !slices.Contains(filepath.SplitList(path), want) {
			t.Fatalf("kubeadm's PATH %s lacks %s", path, want)
		}
	}
	for _, dir := range filepath.SplitList(path) {
		for _, c := range []string{"systemctl", "openrc"} {
			if p := filepath.Join(dir, c); !slices.Contains(cfg.HiddenCommands, p) {
				t.Errorf("%s, on kubeadm's PATH, is not hidden from the node (hidden: %s)", p, strings.Join(cfg.HiddenCommands, " "))
			}
		}
	}
	resolvConf := "/suite/critlet/resolv.conf"
	conf, err := renderKubeadmConfig("unix:///suite/node/containerd/containerd.sock", "v1.37.2", resolvConf)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range strings.Split(string(conf), "\n---\n") {
		var kc struct {
			Kind       string  `json:"kind"`
			ResolvConf *string `json:"resolvConf"`
		}
		if err := yaml.Unmarshal([]byte(doc), &kc); err != nil {
			t.Fatalf("kubeadm's configuration: %v\n%s", err, doc)
		}
		if kc.Kind == "KubeletConfiguration" {
			found = true
			if kc.ResolvConf == nil || *kc.ResolvConf != resolvConf {
				t.Errorf("the kubelet's resolvConf is %v, want the suite's copy %s: the default, /etc/resolv.conf, may lead into the node's empty /run/systemd", kc.ResolvConf, resolvConf)
			}
		}
	}
	if !found {
		t.Fatalf("kubeadm's configuration has no KubeletConfiguration:\n%s", conf)
	}
}
