package packagetest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/settings"
	"github.com/critlet/critlet/test/systemdunit"
)

// repo is the repository root.
var repo = func() string {
	p, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return p
}()

// TestUnitMatchesStock: kubelet.service is the stock package's unit.
func TestUnitMatchesStock(t *testing.T) {
	root := t.TempDir()
	unitDir := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repo, "build/systemd/kubelet.service"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unitDir, "kubelet.service"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := systemdunit.Load(root, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range opts {
		got = append(got, o.Section+"."+o.Name+"="+o.Value)
	}
	want := []string{
		"Unit.Description=kubelet: The Kubernetes Node Agent",
		"Unit.Documentation=https://kubernetes.io/docs/",
		"Unit.Wants=network-online.target",
		"Unit.After=network-online.target",
		"Service.ExecStart=/usr/bin/kubelet",
		"Service.Restart=always",
		"Service.StartLimitInterval=0",
		"Service.RestartSec=10",
		"Install.WantedBy=multi-user.target",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kubelet.service:\n got %q\nwant %q", got, want)
	}
}

// TestDropInsNameTheFormatsSettings: each format's drop-in reads critlet's
// settings from that format's directory, optionally.
func TestDropInsNameTheFormatsSettings(t *testing.T) {
	for file, want := range map[string]string{
		"20-critlet.conf":           "-/etc/default/critlet",
		"20-critlet.sysconfig.conf": "-/etc/sysconfig/critlet",
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "usr/lib/systemd/system")
		if err := os.MkdirAll(filepath.Join(dir, "kubelet.service.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(repo, "build/systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kubelet.service.d", "20-critlet.conf"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kubelet.service"), []byte("[Service]\nExecStart=/usr/bin/kubelet\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		opts, err := systemdunit.Load(root, "kubelet.service")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range opts[1:] {
			got = append(got, o.Section+"."+o.Name+"="+o.Value)
		}
		if w := []string{"Service.EnvironmentFile=" + want}; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %q, want %q", file, got, w)
		}
	}
}

// TestSettingsFileListsEveryVariable: /etc/default/critlet lists each
// CRITLET_PREEMPTION_* variable, commented out, at its default; with the
// comment marks removed it sets exactly the defaults.
func TestSettingsFileListsEveryVariable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "build/default/critlet"))
	if err != nil {
		t.Fatal(err)
	}
	var uncommented []string
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "#CRITLET_"); ok {
			uncommented = append(uncommented, "CRITLET_"+v)
		} else if strings.HasPrefix(l, "CRITLET_") {
			t.Errorf("line %q sets a variable: the shipped file must keep the defaults", l)
		}
	}
	pairs, err := systemdunit.ParseEnvironmentFile(strings.Join(uncommented, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, p := range pairs {
		env[p.Name] = p.Value
	}
	for _, flag := range settings.Flags() {
		if _, ok := env[settings.EnvVar(flag)]; !ok {
			t.Errorf("%s (for --%s) is not listed", settings.EnvVar(flag), flag)
		}
	}
	if len(env) != len(settings.Flags()) {
		t.Errorf("the file lists %d variables, critlet has %d", len(env), len(settings.Flags()))
	}
	got, _, err := settings.FromArgs(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the listed values do not parse: %v", err)
	}
	if got != settings.Defaults() {
		t.Errorf("the listed values are %s, the defaults %s", got, settings.Defaults())
	}
}

// TestStockSettingsFile: /etc/default/kubelet (and sysconfig) holds the
// stock package's single empty KUBELET_EXTRA_ARGS.
func TestStockSettingsFile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "build/default/kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "KUBELET_EXTRA_ARGS=\n" {
		t.Errorf("build/default/kubelet = %q, want %q", data, "KUBELET_EXTRA_ARGS=\n")
	}
}
