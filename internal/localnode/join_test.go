package localnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHideCommands(t *testing.T) {
	n := testNode(t)
	present := filepath.Join(t.TempDir(), "systemd-run")
	if err := os.WriteFile(present, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.l.path("mounts"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.cfg.HiddenCommands = []string{present, filepath.Join(t.TempDir(), "absent")}
	lines, err := n.hideCommands()
	if err != nil {
		t.Fatal(err)
	}
	want := "mount --bind " + shellQuote(n.l.mount("hidden-command")) + " " + shellQuote(present)
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines = %q, want only %q (an absent program needs no cover)", lines, want)
	}
	// The cover must be a file that neither exec nor a PATH lookup accepts.
	st, err := os.Stat(n.l.mount("hidden-command"))
	if err != nil || st.Size() != 0 || st.Mode().Perm()&0o111 != 0 {
		t.Fatalf("cover: %v, %v: want an empty, non-executable file", st, err)
	}

	n.cfg.HiddenCommands = []string{"systemd-run"}
	if _, err := n.hideCommands(); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("a relative program path: err = %v, want it refused", err)
	}
}

func TestRuntimeOnlyNetwork(t *testing.T) {
	lines := strings.Join(privateNetworkLines(), "\n")
	for _, want := range []string{"ip link set lo up", "ip addr add " + NodeIP + "/32", "ip route add default dev critlet-node"} {
		if !strings.Contains(lines, want) {
			t.Errorf("the private network's set-up lacks %q:\n%s", want, lines)
		}
	}
	// The bridge is the pods' gateway only inside a private network.
	for _, runtimeOnly := range []bool{false, true} {
		n := testNode(t)
		n.cfg.RuntimeOnly = runtimeOnly
		var conf struct {
			Plugins []struct {
				Type      string `json:"type"`
				IsGateway *bool  `json:"isGateway"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(n.renderCNIConfig()), &conf); err != nil {
			t.Fatalf("RuntimeOnly=%v: the CNI configuration is not JSON: %v", runtimeOnly, err)
		}
		if p := conf.Plugins[0]; p.Type != "bridge" || p.IsGateway == nil || *p.IsGateway != runtimeOnly {
			t.Errorf("RuntimeOnly=%v: bridge plugin %+v, want isGateway %v", runtimeOnly, p, runtimeOnly)
		}
	}
}
