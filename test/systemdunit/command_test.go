package systemdunit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes files (path under root → content); a content of
// "->target" makes a symlink.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(c, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	stockUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`
	critletDropIn = "[Service]\nEnvironmentFile=-/etc/default/critlet\n"
)

// kubeadmDropIn is kubeadm's drop-in as its package installs it.
func kubeadmDropIn(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../test/package/testdata/10-kubeadm.conf")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestResolveKubeadmNode(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/lib/systemd/system/kubelet.service":                       stockUnit,
		"usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf":     kubeadmDropIn(t),
		"usr/lib/systemd/system/kubelet.service.d/20-critlet.conf":     critletDropIn,
		"var/lib/kubelet/kubeadm-flags.env":                            `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=10.0.0.7"` + "\n",
		"etc/default/kubelet":                                          "KUBELET_EXTRA_ARGS=--v=2 --node-labels='a=b,c=d'\n",
		"etc/default/critlet":                                          "# comment\nCRITLET_PREEMPTION_POLICY=priority\n",
		"usr/lib/systemd/system/kubelet.service.d/README":              "not a drop-in",
		"usr/lib/systemd/system/kubelet.service.d/05-ignored.conf.bak": "[Service]\nExecStart=/bin/false\n",
	})
	got, err := Resolve(root, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	want := Command{
		Path: "/usr/bin/kubelet",
		Argv: []string{"/usr/bin/kubelet",
			"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
			"--config=/var/lib/kubelet/config.yaml",
			"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-ip=10.0.0.7",
			"--v=2", "--node-labels=a=b,c=d"},
		Env: []string{
			"CRITLET_PREEMPTION_POLICY=priority",
			"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml",
			"KUBELET_EXTRA_ARGS=--v=2 --node-labels='a=b,c=d'",
			"KUBELET_KUBEADM_ARGS=--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=10.0.0.7",
			"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf",
		},
		EnvironmentFiles: []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/default/critlet"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got, want)
	}
}

func TestResolveWithoutKubeadm(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/lib/systemd/system/kubelet.service":                   stockUnit,
		"usr/lib/systemd/system/kubelet.service.d/20-critlet.conf": critletDropIn,
	})
	got, err := Resolve(root, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/kubelet"}; !reflect.DeepEqual(got.Argv, want) || len(got.Env) != 0 || len(got.EnvironmentFiles) != 0 {
		t.Errorf("got %#v, want argv %q, no environment (the optional file is absent)", got, want)
	}
}

func TestResolvePrecedence(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		// /etc wins over /usr/lib for the unit and for a drop-in of the same name.
		"usr/lib/systemd/system/x.service":          "[Service]\nExecStart=/bin/lib\n",
		"etc/systemd/system/x.service":              "[Service]\nExecStart=/bin/etc $A ${B} pre${B}post $$C $UNSET \"${A}\" :$A\n",
		"usr/lib/systemd/system/x.service.d/a.conf": "[Service]\nEnvironment=A=lib\n",
		"etc/systemd/system/x.service.d/a.conf":     "[Service]\nEnvironment=\"A=one  two\" B=b\n",
		// Files override Environment= whatever the order; later files win.
		"etc/systemd/system/x.service.d/b.conf": "[Service]\nEnvironmentFile=/f1\nEnvironment=B=late\nEnvironmentFile=-/f2\n",
		"f1":                                    "B=file1\n",
		"f2":                                    "B=file2\n",
	})
	got, err := Resolve(root, "x.service")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/etc", "one", "two", "file2", "prefile2post", "$C", "one  two", ":$A"}
	if !reflect.DeepEqual(got.Argv, want) {
		t.Errorf("argv %q, want %q", got.Argv, want)
	}
}

func TestResolveExecPrefixes(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"lib/systemd/system/a.service": "[Service]\nEnvironment=V=v\nExecStart=-@/bin/real name $V\n",
		"lib/systemd/system/b.service": "[Service]\nEnvironment=V=v\nExecStart=:/bin/b $V\n",
		"lib/systemd/system/c.service": "[Service]\nExecStart=/bin/c 100%% \"a\\sb\"\n",
	})
	for unit, want := range map[string][]string{
		"a.service": {"name", "v"},
		"b.service": {"/bin/b", "$V"},
		"c.service": {"/bin/c", "100%", "a b"},
	} {
		got, err := Resolve(root, unit)
		if err != nil {
			t.Fatalf("%s: %v", unit, err)
		}
		if !reflect.DeepEqual(got.Argv, want) {
			t.Errorf("%s: argv %q, want %q", unit, got.Argv, want)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"missing":            {map[string]string{}, "not found"},
		"masked":             {map[string]string{"etc/systemd/system/u.service": "->/dev/null", "usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/x\n"}, "masked"},
		"no ExecStart":       {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nRestart=always\n"}, "no ExecStart"},
		"two ExecStart":      {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/x\n", "usr/lib/systemd/system/u.service.d/d.conf": "[Service]\nExecStart=/bin/y\n"}, "2 ExecStart"},
		"relative path":      {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nExecStart=kubelet\n"}, "absolute"},
		"required file":      {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nEnvironmentFile=/nope\nExecStart=/bin/x\n"}, "/nope"},
		"bad file":           {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nEnvironmentFile=/f\nExecStart=/bin/x\n", "f": "A='open\n"}, "unterminated"},
		"specifier":          {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/x %n\n"}, "specifier"},
		"bad Environment":    {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nEnvironment=novalue\nExecStart=/bin/x\n"}, "NAME=value"},
		"oneshot":            {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nType=oneshot\nExecStart=/bin/x\n"}, "one main process"},
		"unterminated quote": {map[string]string{"usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/x \"open\n"}, "unterminated"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			got, err := Resolve(root, "u.service")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %#v, %v; want an error mentioning %q", got, err, tc.want)
			}
		})
	}
}
