package localnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/internal/localnode/stateguard"
	sgt "github.com/critlet/critlet/internal/localnode/stateguard/stateguardtest"
)

// The node holds its state directory to stateguard's rules: Up and Down
// refuse what the guard refuses, before they touch anything, and whatever
// the node writes goes through no link.

// markedNode makes dir look like a node's state directory: the marker, a
// manifest naming run and etcd, a PID file and etcd's data.
func markedNode(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"run", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{stateguard.MarkerFile: "", stateguard.ManifestFile: "state run\nstate etcd\n", "run/etcd.pid": "999999999 1\n", "etcd/data": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// refusedByUpAndDown checks that Up and Down both refuse dir, saying want,
// and that Down removed nothing.
func refusedByUpAndDown(t *testing.T, dir, want string) {
	t.Helper()
	data := filepath.Join(dir, "etcd", "data")
	_, err := os.Stat(data)
	had := err == nil
	if err := Down(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "refused: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("Down(%s) = %v, want a refusal saying %q", dir, err, want)
	}
	// Refused before Up looks for root, tools or binaries.
	cfg := Config{StateDir: dir, BinDir: filepath.Join(t.TempDir(), "none"), Kubelet: "/nonexistent"}
	if _, err := UpRuntime(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("UpRuntime(%s) = %v, want a refusal saying %q", dir, err, want)
	}
	if _, err := os.Stat(data); had && err != nil {
		t.Errorf("a refused state directory lost etcd's data: %v", err)
	}
}

// A state directory another user owns is refused: that user could forge a
// PID file for root to signal, or plant a link for root to write through.
func TestStateDirOwnedByAnotherUserIsRefused(t *testing.T) {
	dir := sgt.Mkdir(t, filepath.Join(t.TempDir(), "theirs"), 0o755, sgt.Nobody)
	markedNode(t, dir)
	refusedByUpAndDown(t, dir, dir+" is owned by uid 65534")

	// Also when only a parent is theirs: they can rename the state
	// directory away and put another in its place.
	parent := sgt.Mkdir(t, filepath.Join(t.TempDir(), "home"), 0o755, sgt.Nobody)
	inner := sgt.Mkdir(t, filepath.Join(parent, "node"), 0o755, 0)
	markedNode(t, inner)
	refusedByUpAndDown(t, inner, parent+" is owned by uid 65534")
}

// A state directory below a directory that group or others can write is
// refused; a root-owned sticky directory above it (/tmp) is not, but is
// never the state directory itself. That a directory below a sticky one is
// accepted, and that a name another user took first there is refused, is
// stateguard's TestStickyDirAbove.
func TestStateDirUnderWritableParentIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o775, 0o757} {
		parent := sgt.Mkdir(t, filepath.Join(t.TempDir(), "shared"), mode, 0)
		dir := sgt.Mkdir(t, filepath.Join(parent, "node"), 0o755, 0)
		markedNode(t, dir)
		refusedByUpAndDown(t, dir, "can be written by its group or by others")
	}

	sticky := sgt.Mkdir(t, filepath.Join(t.TempDir(), "tmp"), 0o777|os.ModeSticky, 0)
	markedNode(t, sticky)
	refusedByUpAndDown(t, sticky, "is a shared directory")
}

// Links on the way are followed only when root owns them, and the state
// directory is used by the path they resolve to.
func TestStateDirLinksMustBeRoots(t *testing.T) {
	tmp := t.TempDir()
	real := sgt.Mkdir(t, filepath.Join(tmp, "real"), 0o755, 0)
	link := filepath.Join(tmp, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if got, err := stateguard.Trust(link); err != nil || got != real {
		t.Errorf("stateguard.Trust(root's link) = %q, %v; want %q", got, err, real)
	}
	if err := os.Lchown(link, sgt.Nobody, sgt.Nobody); err != nil {
		t.Fatal(err)
	}
	markedNode(t, real)
	refusedByUpAndDown(t, link, link+" is a symbolic link owned by uid 65534")
}

// Directories a mistyped STATE_DIR could name are refused by Up and Down
// alike, and lose nothing.
func TestCheckStateDir(t *testing.T) {
	tmp := t.TempDir()
	full := filepath.Join(tmp, "full")
	marked := filepath.Join(tmp, "marked")
	empty := filepath.Join(tmp, "empty")
	for _, d := range []string{full, marked, empty} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(full, "images"), filepath.Join(marked, stateguard.MarkerFile), filepath.Join(marked, "logs")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	toEtc := filepath.Join(tmp, "etc-link")
	if err := os.Symlink("/etc", toEtc); err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		"/":                         "system or home directory",
		"/var":                      "system or home directory",
		"/var/lib/":                 "system or home directory",
		"/run":                      "system or home directory",
		toEtc:                       "system or home directory",
		home:                        "system or home directory",
		full:                        "no local node created it",
		marked:                      "",
		empty:                       "",
		filepath.Join(tmp, "fresh"): "",
	} {
		err := stateguard.Check(dir)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("stateguard.Check(%s) = %v, want %q", dir, err, want)
		}
	}

	// Down refuses the same, and an unclaimed directory is reported as
	// such, with its files still there.
	if err := Down(Config{StateDir: full}); err == nil || errors.Is(err, ErrNotANode) {
		t.Errorf("Down on a full directory no node created: %v", err)
	}
	if err := Down(Config{StateDir: empty}); !errors.Is(err, ErrNotANode) {
		t.Errorf("Down on an empty directory: %v, want ErrNotANode", err)
	}
	if err := Down(Config{StateDir: "/"}); err == nil || !strings.Contains(err.Error(), "system or home directory") {
		t.Errorf("Down on /: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "images")); err != nil {
		t.Errorf("a refused directory lost a file: %v", err)
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
		{"marker", stateguard.MarkerFile, func(n *Node) error { return n.claim() }},
		{"manifest", stateguard.ManifestFile, func(n *Node) error { return stateguard.Claim(n.l.root) }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			n := testNode(t)
			v := sgt.Victim(t)
			sgt.Plant(t, v, n.l.path(w.entry))
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
			sgt.Plant(t, elsewhere, n.l.path(d.entry))
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

// A cluster's state directory carries the node's marker too (the cluster
// claims it by the same rules); a node refuses it, touching nothing.
func TestClusterStateDirIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	markedNode(t, dir)
	if err := os.WriteFile(filepath.Join(dir, stateguard.ClusterMarkerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "is critlet-cluster's") {
		t.Errorf("Down on a cluster's directory: %v, want a refusal", err)
	}
	cfg := Config{StateDir: dir, BinDir: filepath.Join(t.TempDir(), "none"), Kubelet: "/nonexistent"}
	if _, err := UpRuntime(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "is critlet-cluster's") {
		t.Errorf("UpRuntime on a cluster's directory: %v, want a refusal", err)
	}
	for _, f := range []string{"etcd/data", stateguard.ManifestFile, "run/etcd.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("a refused cluster directory lost %s: %v", f, err)
		}
	}
}
