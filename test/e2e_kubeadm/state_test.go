//go:build e2ekubeadm

package e2ekubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/stateguard"
)

// installRoots are the kubelets' install roots in the state directory, by
// kubelet.
var installRoots = map[string]string{"critlet": "root-critlet", "stock": "root-stock"}

// prepareState opens the suite's state directory and makes the kubelets'
// install roots in it afresh. The suite runs as root and removes trees,
// installs packages (dpkg --root, its database included) and writes files
// there, so the directory is first held to the rule the local node holds
// its own to: root's alone, from / down. What the suite makes directly in
// it is made through the open directory, never through a link; below what
// it made so, only root can change anything. The caller closes it.
func prepareState(dir string) (*stateguard.Dir, map[string]string, error) {
	state, err := stateguard.Create(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("-state: %w", err)
	}
	roots := map[string]string{}
	for name, rel := range installRoots {
		if roots[name], err = state.Fresh(rel, 0o755); err != nil {
			state.Close()
			return nil, nil, fmt.Errorf("-state: %w", err)
		}
	}
	return state, roots, nil
}

// writeReport writes the notes to report.md in the state directory, never
// through a link.
func writeReport(state *stateguard.Dir, rows []string) error {
	if err := state.WriteFile("report.md", []byte("# kubeadm\n\n- "+strings.Join(rows, "\n- ")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// The suite writes nothing in a state directory another user could
// change, and nothing through a link planted in one it accepts: each
// would turn its root writes (report.md, the scratch dpkg database) into
// writes wherever the link points.
func TestStateDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, as the suite does: it makes directories another user owns")
	}
	victimDir := t.TempDir()
	victim := filepath.Join(victimDir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(dir string) {
		t.Helper()
		for link, target := range map[string]string{"report.md": victim, "root-critlet": victimDir} {
			if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
	}
	untouched := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
			t.Errorf("%s: the links' target holds %q, %v; want it untouched", what, b, err)
		}
		if entries, _ := os.ReadDir(victimDir); len(entries) != 1 {
			t.Errorf("%s: the linked directory holds %v, want only the victim", what, entries)
		}
	}

	// Another user's directory, with their links in it: refused before
	// anything is written.
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(theirs)
	if err := os.Lchown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if state, _, err := prepareState(theirs); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		if state != nil {
			_ = writeReport(state, []string{"written"})
			state.Close()
		}
		t.Errorf("prepareState(another user's directory) = %v, want a refusal", err)
	}
	if _, err := os.Lstat(filepath.Join(theirs, "root-stock")); err == nil {
		t.Error("a root made root-stock in another user's directory")
	}
	untouched("another user's directory")

	// A directory only root can change, holding links (an earlier owner's,
	// say): the install roots replace theirs, the report is not written
	// through one.
	ours := filepath.Join(t.TempDir(), "ours")
	if err := os.Mkdir(ours, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(ours)
	state, roots, err := prepareState(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	for name, root := range roots {
		if fi, err := os.Lstat(root); err != nil || !fi.IsDir() || filepath.Dir(root) != ours {
			t.Errorf("%s's install root %s: %v, %v; want a directory of its own in %s", name, root, fi, err, ours)
		}
	}
	if err := writeReport(state, []string{"written"}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("writing report.md over a link: %v, want a refusal naming the link", err)
	}
	untouched("links in the suite's directory")
}
