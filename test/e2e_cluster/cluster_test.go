//go:build e2ecluster

package e2ecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/cluster"
	"github.com/critlet/critlet/internal/hoststate"
)

// The cluster: n1 the control plane, n2 a critlet worker, n3 a worker
// that starts on the stock kubelet's package and is swapped.
var nodes = []cluster.Node{{Name: "n1", Critlet: true}, {Name: "n2", Critlet: true}, {Name: "n3", Critlet: false}}

// env is the suite's cluster and what it reports.
type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	report []string
	pkgs   cluster.Packages
}

func (e *env) row(format string, args ...any) {
	e.t.Helper()
	line := fmt.Sprintf(format, args...)
	e.t.Log(line)
	e.report = append(e.report, line)
}

// kubectl runs kubectl on the control plane and fails the test on error.
func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.c.Kubectl(e.ctx, "n1", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// in runs a command on machine name and fails the test on error.
func (e *env) in(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := e.c.Exec(e.ctx, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	before := hostRecord(t)
	c, err := cluster.Open(filepath.Join(*stateDir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Machines()) > 0 {
		t.Fatalf("%s holds machines of an earlier run: make cluster-down STATE=%s removes them", *stateDir, *stateDir)
	}
	e := &env{t: t, ctx: ctx, c: c}
	removed := false
	t.Cleanup(func() {
		if !removed {
			if err := c.Down(ctx); err != nil {
				t.Errorf("removing the cluster: %v", err)
			}
		}
		if diff := hoststate.Diff(before, hostRecord(t)); len(diff) > 0 {
			t.Errorf("the host differs after the cluster:\n%s", strings.Join(diff, "\n"))
		}
		writeReport(t, e.report)
	})
	timings, err := c.Up(ctx, cluster.Inputs{Repo: *repo, BinDir: filepath.Join(*repo, "_output/bin"),
		PackageDir: filepath.Join(*repo, "_output/package"), ImageCache: *imageCache}, nodes, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	e.pkgs = c.LastPackages()
	e.row("| machine image | %s (built: %v) |", timings.Image.Round(time.Second), timings.ImageBuilt)
	e.row("| 3 machines booted (systemd running) | %s |", timings.Machines.Round(time.Second))
	e.row("| packages installed with apt, images imported | %s |", timings.Install.Round(time.Second))
	e.row("| kubeadm init → n1 Ready | %s |", timings.Init.Round(time.Second))
	for _, n := range nodes[1:] {
		e.row("| kubeadm join → %s Ready (%s) | %s |", n.Name, kubeletName(n), timings.JoinToReady[n.Name].Round(time.Second))
	}
	t.Run("join", e.join)
	t.Run("preempt", e.preempt)
	t.Run("swap", e.swap)
	t.Run("reboot", e.reboot)
	t.Run("reboot-mid-preemption", e.rebootMidPreemption)
	t.Run("reset", func(t *testing.T) {
		for _, n := range nodes {
			out := e.in(t, n.Name, "kubeadm", "reset", "--force")
			if !strings.Contains(out, "[reset]") {
				t.Errorf("kubeadm reset on %s printed:\n%s", n.Name, out)
			}
			for _, p := range []string{"/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki"} {
				if _, err := os.Stat(filepath.Join(c.RootDir(n.Name), p)); err == nil {
					t.Errorf("%s: %s still there after kubeadm reset", n.Name, p)
				}
			}
		}
		start := time.Now()
		if err := c.Down(ctx); err != nil {
			t.Fatalf("removing the machines: %v", err)
		}
		removed = true
		e.row("| kubeadm reset on every node, machines removed | %s |", time.Since(start).Round(time.Second))
	})
}

func kubeletName(n cluster.Node) string {
	if n.Critlet {
		return "critlet"
	}
	return "stock"
}

// join checks what kubeadm join left on each worker: the kubelet's client
// certificate came from a bootstrap-token CSR that kube-controller-manager
// approved, and the bootstrap kubeconfig is gone.
func (e *env) join(t *testing.T) {
	var csrs struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct {
				Username   string
				SignerName string
			}
			Status struct {
				Conditions  []struct{ Type, Reason string }
				Certificate string
			}
		}
	}
	if err := json.Unmarshal([]byte(e.kubectl(t, "get", "csr", "-o", "json")), &csrs); err != nil {
		t.Fatal(err)
	}
	approved := 0
	for _, c := range csrs.Items {
		if !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") || c.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
			continue
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == "Approved" && cond.Reason == "AutoApproved" && c.Status.Certificate != "" {
				approved++
			}
		}
	}
	if approved != len(nodes)-1 {
		t.Errorf("%d bootstrap-token client CSRs auto-approved and signed, want %d (one per worker):\n%s", approved, len(nodes)-1, e.kubectl(t, "get", "csr"))
	}
	for _, n := range nodes[1:] {
		root := e.c.RootDir(n.Name)
		if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/bootstrap-kubelet.conf")); err == nil {
			t.Errorf("%s: bootstrap-kubelet.conf still there after the join", n.Name)
		}
		link, err := os.Readlink(filepath.Join(root, "var/lib/kubelet/pki/kubelet-client-current.pem"))
		if err != nil {
			t.Errorf("%s: kubelet-client-current.pem: %v", n.Name, err)
		}
		kc, _ := os.ReadFile(filepath.Join(root, "etc/kubernetes/kubelet.conf"))
		if !strings.Contains(string(kc), "/var/lib/kubelet/pki/kubelet-client-current.pem") {
			t.Errorf("%s: kubelet.conf does not use the rotated client certificate:\n%s", n.Name, kc)
		}
		e.row("| %s: client certificate from an approved bootstrap CSR | %s |", n.Name, filepath.Base(link))
	}
	e.row("| bootstrap-token CSRs auto-approved by kube-controller-manager | %d |", approved)
}

// writeReport writes the suite's rows to report.md in the state directory.
func writeReport(t *testing.T, rows []string) {
	body := "# e2e-cluster\n\n| step | result |\n|---|---|\n" + strings.Join(rows, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(*stateDir, "report.md"), []byte(body), 0o644); err != nil {
		t.Error(err)
	}
}
