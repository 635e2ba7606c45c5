package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/kubeadmimages"
	"github.com/critlet/critlet/internal/localnode/oci"
)

// Node is a machine of a cluster and the kubelet package it gets.
type Node struct {
	Name    string
	Critlet bool // critlet's package; the stock kubelet's otherwise
}

// Inputs are what make built, read by Up.
type Inputs struct {
	Repo       string // the repository: units, drop-ins and scripts
	BinDir     string // kubeadm, kubectl, kubelet-stock, nfpm, the control plane
	PackageDir string // critlet's .deb
	ImageCache string // the machine image, kept between clusters
}

// Timings are what Up measured.
type Timings struct {
	Image, Machines, Install, Init time.Duration
	ImageBuilt                     bool
	JoinToReady                    map[string]time.Duration
}

// WorkloadImage runs busybox: the image of the pods the cluster's tests
// and an operator's tries run.
const WorkloadImage = "critlet.local/busybox:1"

func workloadImage() (oci.Image, error) {
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return oci.Image{}, fmt.Errorf("the workload image's busybox (busybox-static): %w", err)
	}
	// A shell as the container's PID 1 ends on SIGTERM only with a trap:
	// without one, a machine's shutdown would wait its full stop timeout.
	return oci.Image{Name: WorkloadImage, Cmd: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}, Files: []oci.File{
		{Path: "/bin/busybox", Mode: 0o755, Content: b},
		{Path: "/bin/sh", Link: "busybox"}, {Path: "/bin/sleep", Link: "busybox"},
	}}, nil
}

// Version is the Kubernetes version kubeadm in binDir deploys.
func Version(binDir string) (string, error) {
	out, err := exec.Command(filepath.Join(binDir, "kubeadm"), "version", "-o", "short").Output()
	if err != nil {
		return "", fmt.Errorf("kubeadm version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Up makes the cluster: the machines, the packages installed (the first
// node gets kubectl too), kubeadm init on the first node and kubeadm join
// on the others, each joined node Ready. progress is told each step.
func (c *Cluster) Up(ctx context.Context, in Inputs, nodes []Node, progress func(string)) (Timings, error) {
	t := Timings{JoinToReady: map[string]time.Duration{}}
	var names []string
	for _, n := range nodes {
		if err := checkMachineName(n.Name); err != nil {
			return t, err
		}
		names = append(names, n.Name)
	}
	// A host the cluster cannot run on is refused before anything is
	// touched; then the state directory and the machine cgroups are
	// claimed before anything is made, the stand-in packages included.
	if err := c.preflight(&in); err != nil {
		return t, err
	}
	if err := c.claim(); err != nil {
		return t, err
	}
	version, err := Version(in.BinDir)
	if err != nil {
		return t, err
	}
	debs := critletDebs(in.PackageDir)
	if len(debs) != 1 {
		return t, fmt.Errorf("want one kubelet-critlet .deb in %s (make package), found %v", in.PackageDir, debs)
	}
	start := time.Now()
	image, built, err := EnsureImage(ctx, in.ImageCache)
	if err != nil {
		return t, err
	}
	t.Image, t.ImageBuilt = time.Since(start), built
	progress(fmt.Sprintf("machine image %s (built: %v) in %s", image, built, t.Image.Round(time.Second)))

	pkgs, err := BuildStandIns(ctx, filepath.Join(in.BinDir, "nfpm"), filepath.Join(c.dir, "packages"), StandIns{
		Version: strings.TrimPrefix(version, "v"), KubeletStock: filepath.Join(in.BinDir, "kubelet-stock"),
		Kubeadm: filepath.Join(in.BinDir, "kubeadm"), Kubectl: filepath.Join(in.BinDir, "kubectl"),
		Unit:           filepath.Join(in.Repo, "build/systemd/kubelet.service"),
		KubeadmDropIn:  filepath.Join(in.Repo, "test/package/testdata/10-kubeadm.conf"),
		KubeletScripts: stockScripts(in.Repo),
	})
	if err != nil {
		return t, err
	}
	pkgs.Critlet = debs[0]
	c.pkgs = pkgs
	cp, err := kubeadmimages.ControlPlane(in.BinDir, version)
	if err != nil {
		return t, err
	}
	wl, err := workloadImage()
	if err != nil {
		return t, err
	}

	start = time.Now()
	if err := c.Create(ctx, image, kubeadmimages.PauseRef, names); err != nil {
		return t, err
	}
	t.Machines = time.Since(start)
	progress(fmt.Sprintf("%d machines booted in %s", len(nodes), t.Machines.Round(time.Second)))

	start = time.Now()
	for i, n := range nodes {
		kubelet := pkgs.Kubelet
		if n.Critlet {
			kubelet = pkgs.Critlet
		}
		set := []string{pkgs.CNI, kubelet, pkgs.Kubeadm}
		images := []oci.Image{wl}
		if i == 0 {
			set = append(set, pkgs.Kubectl)
			images = append(images, cp...)
		} else {
			for _, img := range cp {
				if img.Name == kubeadmimages.PauseRef {
					images = append(images, img) // the sandbox image alone
				}
			}
		}
		if _, err := c.Install(ctx, n.Name, set...); err != nil {
			return t, fmt.Errorf("installing on %s: %w", n.Name, err)
		}
		if err := c.ImportImages(ctx, n.Name, images); err != nil {
			return t, err
		}
	}
	t.Install = time.Since(start)
	progress(fmt.Sprintf("packages installed and images imported in %s", t.Install.Round(time.Second)))

	start = time.Now()
	if _, err := c.Init(ctx, nodes[0].Name, version); err != nil {
		return t, fmt.Errorf("kubeadm init: %w", err)
	}
	if err := c.WaitReady(ctx, nodes[0].Name, nodes[0].Name, 3*time.Minute); err != nil {
		return t, err
	}
	// A control-plane node keeps its taint: workloads go to the workers.
	t.Init = time.Since(start)
	progress(fmt.Sprintf("kubeadm init on %s: Ready in %s", nodes[0].Name, t.Init.Round(time.Second)))
	for _, n := range nodes[1:] {
		start := time.Now()
		if _, err := c.Join(ctx, nodes[0].Name, n.Name); err != nil {
			return t, fmt.Errorf("kubeadm join of %s: %w", n.Name, err)
		}
		if err := c.WaitReady(ctx, nodes[0].Name, n.Name, 3*time.Minute); err != nil {
			return t, err
		}
		t.JoinToReady[n.Name] = time.Since(start)
		progress(fmt.Sprintf("kubeadm join of %s: Ready in %s", n.Name, t.JoinToReady[n.Name].Round(time.Second)))
	}
	return t, nil
}

// stockScripts are the stock kubelet .deb's maintainer scripts, as
// pkgs.k8s.io's package carries them (test/package keeps them).
func stockScripts(repo string) map[string]string {
	dir := filepath.Join(repo, "test/package/testdata/stock/deb")
	return map[string]string{
		"postinstall": filepath.Join(dir, "postinst"),
		"preremove":   filepath.Join(dir, "prerm"),
		"postremove":  filepath.Join(dir, "postrm"),
	}
}
