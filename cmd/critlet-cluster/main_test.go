package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/localnode/stateguard"
	sgt "github.com/critlet/critlet/internal/localnode/stateguard/stateguardtest"
)

// issue 46: `down --state DIR` with a forged record removed a directory and
// a file outside DIR, and exited 0; the same in a directory anyone could
// write. Both refused, both kept.
func TestDownRefusesForgedRecords(t *testing.T) {
	base := t.TempDir()
	victimDir := filepath.Join(base, "victim")
	if err := os.Mkdir(victimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	victimFile := sgt.Victim(t)
	record := fmt.Sprintf(`{"machines": [{"name": "../../victim", "index": 1, "addr": "10.250.0.11", "nic": {}, "cgroups": [], "boots": 0}], "host_dirs": [%q]}`, victimFile)
	for _, mode := range []os.FileMode{0o755, 0o777} {
		dir := filepath.Join(base, fmt.Sprintf("state-%o", mode))
		sgt.Mkdir(t, dir, mode, 0)
		for name, data := range map[string]string{stateguard.MarkerFile: "", stateguard.ClusterMarkerFile: "", "record.json": record} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := run([]string{"down", "--state", dir})
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("down --state %s (mode %o): %v", dir, mode, err)
		}
		for _, p := range []string{victimDir, victimFile} {
			if _, err := os.Lstat(p); err != nil {
				t.Fatalf("down --state %s (mode %o) removed %s", dir, mode, p)
			}
		}
	}
}

// The cluster and the local node claim their directories by the same
// rules, and each refuses the other's: a cluster's down on a local node's
// directory would otherwise read no record, write one and remove the
// node's manifest, and the node's own down would then leave what it made.
func TestDownRefusesALocalNodesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	if err := stateguard.Claim(dir); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, stateguard.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"down", "status"} {
		err := run([]string{cmd, "--state", dir})
		if err == nil || !strings.Contains(err.Error(), "is a local node's") {
			t.Errorf("%s --state on a local node's directory: %v, want a refusal", cmd, err)
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, stateguard.ManifestFile))
	if err != nil || string(after) != string(manifest) {
		t.Errorf("the local node's manifest changed: %q (%v), was %q", after, err, manifest)
	}
	if _, err := os.Lstat(filepath.Join(dir, "record.json")); err == nil {
		t.Error("a cluster record was written into a local node's directory")
	}
}
