package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
)

// StandIns are the inputs of stand-ins for pkgs.k8s.io's packages, which
// this machine cannot download: their files where the real ones put them
// and the kubelet's maintainer scripts as the real one carries them.
type StandIns struct {
	Version        string // upstream's, e.g. 1.37.2
	KubeletStock   string // the stock kubelet binary
	Kubeadm        string
	Kubectl        string
	Unit           string            // kubelet.service, as upstream ships it
	KubeadmDropIn  string            // 10-kubeadm.conf
	KubeletScripts map[string]string // nfpm script name (postinstall, …) → file
}

// Packages are the .debs of a cluster's machines.
type Packages struct {
	Critlet string // kubelet-critlet, from make package
	Kubelet string // the stock kubelet (stand-in)
	Kubeadm string // kubeadm with its kubelet drop-in (stand-in)
	Kubectl string
	CNI     string // kubernetes-cni (stand-in: Debian's plugins at its paths)
}

// cniPlugins are the plugins kubernetes-cni puts in /opt/cni/bin that the
// machines use; Debian's containernetworking-plugins has them in
// /usr/lib/cni.
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

const standInTemplate = `name: {{.Name}}
arch: {{.Arch}}
version: {{.Version}}
release: "1.1"
maintainer: critlet
description: stand-in for pkgs.k8s.io's {{.Name}} package
{{- if .Depends}}
depends: [{{range $i, $d := .Depends}}{{if $i}}, {{end}}"{{$d}}"{{end}}]
{{- end}}
contents:
{{- range .Contents}}
  - {{.}}
{{- end}}
{{- if .Scripts}}
scripts:
{{- range $k, $v := .Scripts}}
  {{$k}}: {{$v}}
{{- end}}
{{- end}}
`

type standIn struct {
	Name, Arch, Version string
	Depends             []string
	Contents            []string
	Scripts             map[string]string
}

// BuildStandIns builds the stand-in packages into dir with nfpm.
func BuildStandIns(ctx context.Context, nfpm, dir string, in StandIns) (Packages, error) {
	file := func(src, dst string, mode string) string {
		return fmt.Sprintf("{src: %q, dst: %q, file_info: {mode: %s}}", src, dst, mode)
	}
	var cni []string
	for _, p := range cniPlugins {
		cni = append(cni, fmt.Sprintf("{src: %q, dst: %q, type: symlink}", "/usr/lib/cni/"+p, "/opt/cni/bin/"+p))
	}
	env := filepath.Join(dir, "kubelet.env")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Packages{}, err
	}
	if err := os.WriteFile(env, []byte("KUBELET_EXTRA_ARGS=\n"), 0o644); err != nil {
		return Packages{}, err
	}
	pkgs := []standIn{
		{Name: "kubernetes-cni", Version: "1.4.0", Depends: []string{"containernetworking-plugins"}, Contents: cni},
		{Name: "kubelet", Version: in.Version, Depends: []string{"kubernetes-cni (>= 1.2.0)"}, Contents: []string{
			file(in.KubeletStock, "/usr/bin/kubelet", "0o755"),
			file(in.Unit, "/lib/systemd/system/kubelet.service", "0o644"),
			fmt.Sprintf("{src: %q, dst: /etc/default/kubelet, type: config|noreplace, file_info: {mode: 0o644}}", env),
			"{dst: /var/lib/kubelet, type: dir}", "{dst: /etc/kubernetes/manifests, type: dir}",
		}, Scripts: in.KubeletScripts},
		{Name: "kubeadm", Version: in.Version, Depends: []string{"kubelet (>= 1.19.0)"}, Contents: []string{
			file(in.Kubeadm, "/usr/bin/kubeadm", "0o755"),
			file(in.KubeadmDropIn, "/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", "0o644"),
		}},
		{Name: "kubectl", Version: in.Version, Contents: []string{file(in.Kubectl, "/usr/bin/kubectl", "0o755")}},
	}
	out := map[string]string{}
	tmpl := template.Must(template.New("").Parse(standInTemplate))
	for _, p := range pkgs {
		p.Arch = runtime.GOARCH
		var b bytes.Buffer
		if err := tmpl.Execute(&b, p); err != nil {
			return Packages{}, err
		}
		cfg := filepath.Join(dir, p.Name+".yaml")
		if err := os.WriteFile(cfg, b.Bytes(), 0o644); err != nil {
			return Packages{}, err
		}
		target := filepath.Join(dir, p.Name+".deb")
		cmd := exec.CommandContext(ctx, nfpm, "package", "--config", cfg, "--packager", "deb", "--target", target)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			return Packages{}, fmt.Errorf("nfpm (%s): %w: %s", p.Name, err, strings.TrimSpace(string(o)))
		}
		out[p.Name] = target
	}
	return Packages{Kubelet: out["kubelet"], Kubeadm: out["kubeadm"], Kubectl: out["kubectl"], CNI: out["kubernetes-cni"]}, nil
}

// Install installs debs on machine name as an operator does: copied in,
// then `apt-get install ./….deb`, which resolves them against each other
// and what the machine has, and runs their maintainer scripts under the
// machine's systemd. It returns apt's output.
func (c *Cluster) Install(ctx context.Context, name string, debs ...string) (string, error) {
	dir := "/var/cache/critlet-cluster"
	host := filepath.Join(c.RootDir(name), dir)
	if err := os.MkdirAll(host, 0o755); err != nil {
		return "", err
	}
	args := []string{"apt-get", "install", "-y", "--allow-downgrades"}
	for _, d := range debs {
		b, err := os.ReadFile(d)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(host, filepath.Base(d)), b, 0o644); err != nil {
			return "", err
		}
		// apt takes a file for a package by its path: absolute, as
		// apt-get install ./x.deb makes it.
		args = append(args, dir+"/"+filepath.Base(d))
	}
	return c.Exec(ctx, name, args...)
}
