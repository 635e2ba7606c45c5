package localnode

import (
	"slices"
	"testing"
)

func names(cs []component) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// The one table: start order, what each kind of node runs before its
// kubelet, and a start and a health check for every component but the
// kubelet's.
func TestComponentTable(t *testing.T) {
	if got, want := names(components), []string{Etcd, APIServer, Containerd, Kubelet}; !slices.Equal(got, want) {
		t.Fatalf("components %q, want %q in start order", got, want)
	}
	if got := names(Config{}.base()); !slices.Equal(got, []string{Etcd, APIServer, Containerd}) {
		t.Errorf("a full node's base: %q", got)
	}
	if got := names(Config{RuntimeOnly: true}.base()); !slices.Equal(got, []string{Containerd}) {
		t.Errorf("a RuntimeOnly node's base: %q", got)
	}
	ports := map[string]int{}
	cfg := Config{Ports: Ports{EtcdClient: 1, APIServer: 2}}
	for _, c := range components {
		if (c.part == partAgent) != (c.start == nil) || (c.part == partAgent) != (c.healthy == nil) {
			t.Errorf("%s: start or health check missing, or given to the kubelet (StartKubelet's)", c.name)
		}
		if c.healthy != nil && c.healthyMeans == "" {
			t.Errorf("%s: its health check does not say what it checks", c.name)
		}
		if c.port != nil {
			ports[c.name] = c.port(cfg)
		}
	}
	if want := map[string]int{Etcd: 1, APIServer: 2}; len(ports) != 2 || ports[Etcd] != 1 || ports[APIServer] != 2 {
		t.Errorf("ports %v, want %v", ports, want)
	}
}
