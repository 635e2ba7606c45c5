// Package kubeadmimages builds the images kubeadm runs a control plane
// from, out of the binaries make built, for machines without a registry.
package kubeadmimages

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"

	"github.com/critlet/critlet/internal/localnode/oci"
)

// Repository is the kubeadm configuration's imageRepository. No
// registry serves it: every image kubeadm names is built here and imported.
const Repository = "critlet.local/kubeadm"

// Ref is kubeadm's reference for one of its images.
func Ref(name, tag string) string { return Repository + "/" + name + ":" + tag }

// PauseRef is the sandbox image, kubeadm's pause under imageRepository;
// containerd is configured with it, as kubeadm's preflight expects.
var PauseRef = Ref("pause", kubeadmconstants.PauseVersion)

// ControlPlane builds the images kubeadm runs the control plane from
// (and the sandbox image), from the binaries make built: the pinned
// module's, tagged with kubeadm's own versions. etcd's tag is kubeadm's
// default for this release, which must be of the etcd built here.
func ControlPlane(binDir, k8sVersion string) ([]oci.Image, error) {
	out, err := exec.Command(filepath.Join(binDir, "etcd"), "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("etcd --version: %w: %s", err, out)
	}
	etcdTag := kubeadmconstants.DefaultEtcdVersion
	if want := "etcd Version: " + strings.SplitN(etcdTag, "-", 2)[0] + "\n"; !strings.Contains(string(out), want) {
		return nil, fmt.Errorf("kubeadm %s runs etcd %s, but %s/etcd is %q: rebuild it from go.mod's pin", k8sVersion, etcdTag, binDir, strings.TrimSpace(string(out)))
	}
	var images []oci.Image
	for _, c := range []struct{ name, tag string }{
		{kubeadmconstants.KubeAPIServer, k8sVersion},
		{kubeadmconstants.KubeControllerManager, k8sVersion},
		{kubeadmconstants.KubeScheduler, k8sVersion},
		{kubeadmconstants.Etcd, etcdTag},
	} {
		files, err := BinaryFiles(filepath.Join(binDir, c.name), "/usr/local/bin/"+c.name)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", c.name, err)
		}
		// kubeadm's manifests name the command alone; runc finds it on PATH.
		images = append(images, oci.Image{Name: Ref(c.name, c.tag), Cmd: []string{c.name}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Files: append(files, oci.File{Path: "/tmp", Mode: os.ModeDir | 0o1777})})
	}
	pause, err := os.ReadFile(filepath.Join(binDir, "pause"))
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	images = append(images, oci.Image{Name: PauseRef, Entrypoint: []string{"/pause"}, Files: []oci.File{{Path: "/pause", Mode: 0o755, Content: pause}}})
	return images, nil
}

// BinaryFiles returns a binary as file dst of an image, with the shared
// libraries and the loader it links against at the paths it names. The
// control plane is built with cgo like the kubelets (one build graph, one
// cache), so its images carry the host's C library, as a distroless base
// image would carry its own.
func BinaryFiles(src, dst string) ([]oci.File, error) {
	content, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	files := []oci.File{{Path: dst, Mode: 0o755, Content: content}}
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		// ldd fails on a static binary, saying so: it needs nothing more.
		var exit *exec.ExitError
		if errors.As(err, &exit) && strings.Contains(string(exit.Stderr), "not a dynamic executable") {
			return files, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", src, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0] // the loader
		case len(f) >= 2 && f[1] == "=>":
			return nil, fmt.Errorf("%s needs %s, which ldd did not find", src, f[0])
		default:
			continue // the vDSO
		}
		b, err := os.ReadFile(lib)
		if err != nil {
			return nil, fmt.Errorf("library of %s: %w", src, err)
		}
		files = append(files, oci.File{Path: lib, Mode: 0o755, Content: b})
	}
	return files, nil
}
