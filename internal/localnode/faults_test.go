package localnode

import (
	"context"
	"os"
	"strings"
	"testing"
)

// Faults need the part they act on, and a containerd restart needs a
// holder of the node's namespace: without them they refuse, saying why,
// before stopping anything.
func TestFaultsRefuseWithoutTheirComponent(t *testing.T) {
	n := testNode(t)
	if err := os.MkdirAll(n.l.path("run"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, fault := range map[string]func() error{
		"KillKubelet":       n.KillKubelet,
		"RestartContainerd": func() error { return n.RestartContainerd(context.Background()) },
	} {
		err := fault()
		if err == nil || !strings.Contains(err.Error(), "not running") {
			t.Errorf("%s without a kubelet: %v, want an error saying the kubelet is not running", name, err)
		}
	}
	ro := testNode(t)
	ro.cfg.RuntimeOnly = true
	if err := ro.RestartAPIServer(context.Background()); err == nil || !strings.Contains(err.Error(), "no API server") {
		t.Errorf("RestartAPIServer on a RuntimeOnly node: %v, want a refusal", err)
	}
}
