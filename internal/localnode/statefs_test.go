package localnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/process"
)

// victim is a file outside the state directory that a planted link points
// to; it must keep its contents.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func plant(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// What the node writes in its state directory, it never writes through a
// link planted there: the write fails and the link's target keeps its
// contents. Directories the node makes are never links either.
func TestNodeWritesThroughNoLink(t *testing.T) {
	writes := []struct {
		name  string
		entry string // where the link is planted, relative to the state directory
		write func(n *Node) error
	}{
		{"kubelet configuration", "kubelet/config.yaml", func(n *Node) error { _, err := n.writeKubeletConfig(); return err }},
		{"kubelet spec", "run/kubelet.spec", func(n *Node) error {
			return n.l.writeFile(n.l.path("run", "kubelet.spec"), []byte(n.kubeletSpec()), 0o644)
		}},
		{"containerd configuration", "containerd/config.toml", func(n *Node) error { _, err := n.writeContainerdConfig(); return err }},
		{"CNI configuration", "cni/net.d/10-critlet.conflist", func(n *Node) error { _, err := n.writeContainerdConfig(); return err }},
		{"masked sysctl", "sysctl/kernel.panic", func(n *Node) error {
			_, err := n.applyNamespace(namespacePlan{files: []nodeFile{{n.l.path("sysctl", "kernel.panic"), []byte("0\n")}}})
			return err
		}},
		{"hidden command's cover", "mounts/hidden-command", func(n *Node) error {
			n.cfg.HiddenCommands = []string{"/bin/sh"}
			p, err := planNamespace(n.cfg, n.l, theHost)
			if err != nil {
				return err
			}
			p.hostDirs, p.private = nil, nil // the host's, not the state directory's
			_, err = n.applyNamespace(p)
			return err
		}},
		{"marker", markerFile, func(n *Node) error { return n.claim() }},
		{"manifest", manifestFile, func(n *Node) error { return n.l.record("state", "run") }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			n := testNode(t)
			v := victim(t)
			plant(t, v, n.l.path(w.entry))
			err := w.write(n)
			if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
				t.Errorf("writing %s through a planted link: err = %v, want a refusal naming the link", w.entry, err)
			}
			if b, _ := os.ReadFile(v); string(b) != "precious" {
				t.Errorf("the link's target now holds %q", b)
			}
		})
	}

	// A directory of the node planted as a link to somewhere else: nothing
	// is made there.
	dirs := []struct {
		name, entry string
		write       func(n *Node) error
	}{
		{"kubelet directory", "kubelet", func(n *Node) error { _, err := n.writeKubeletConfig(); return err }},
		{"containerd directory", "containerd", func(n *Node) error { _, err := n.writeContainerdConfig(); return err }},
		{"run directory (PID files)", "run", func(n *Node) error {
			h, err := n.start(process.Spec{Name: "true", Path: "/bin/true"})
			if err == nil {
				<-h.Done()
			}
			return err
		}},
		{"logs directory", "logs", func(n *Node) error {
			h, err := n.start(process.Spec{Name: "true", Path: "/bin/true"})
			if err == nil {
				<-h.Done()
			}
			return err
		}},
	}
	for _, d := range dirs {
		t.Run(d.name, func(t *testing.T) {
			n := testNode(t)
			elsewhere := t.TempDir()
			plant(t, elsewhere, n.l.path(d.entry))
			err := d.write(n)
			if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
				t.Errorf("writing below a planted link %s: err = %v, want a refusal naming the link", d.entry, err)
			}
			if entries, _ := os.ReadDir(elsewhere); len(entries) > 0 {
				t.Errorf("the node wrote where the link points: %v", entries)
			}
		})
	}
}

// Removal happens in the directory that was checked and opened: a state
// directory swapped for a link afterwards (to /var/lib, say) loses nothing
// where the link points. A link inside a removed tree is removed, not
// followed.
func TestRemovalFollowsNoSwappedLink(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "node")
	for _, d := range []string{"node/containerd/root", "varlib/containerd", "elsewhere"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(tmp, "varlib", "containerd", "keep")
	inner := filepath.Join(tmp, "elsewhere", "keep")
	for _, f := range []string{keep, inner} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plant(t, filepath.Join(tmp, "elsewhere"), filepath.Join(dir, "containerd", "root", "link"))

	r, err := openStateRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	// The swap, after the checks.
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	plant(t, filepath.Join(tmp, "varlib"), dir)

	if err := r.removeAll("containerd"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("removal went through the swapped-in link: %v", err)
	}
	if _, err := os.Stat(inner); err != nil {
		t.Errorf("removal followed a link inside the tree: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir+".moved", "containerd")); !os.IsNotExist(err) {
		t.Errorf("the checked directory's entry is still there: %v", err)
	}
}

// A read-only tree (Go's module cache) is removed whole.
func TestRemoveAllReadOnlyTree(t *testing.T) {
	n := testNode(t)
	ro := n.l.path("kubelet", "gopath", "pkg", "mod")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "f"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ro, filepath.Dir(ro)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	r, err := openStateRoot(n.l.root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if err := r.removeAll("kubelet"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(n.l.path("kubelet")); !os.IsNotExist(err) {
		t.Errorf("kubelet still there: %v", err)
	}
}
