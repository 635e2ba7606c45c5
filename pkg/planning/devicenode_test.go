package planning

import (
	"strings"
	"testing"
)

func TestDeviceCountRefusal(t *testing.T) {
	for msg, want := range map[string]bool{
		// The device manager's words, through the topology manager's admit handler.
		"Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 0, which is unexpected": true,
		"Allocate failed due to cannot allocate unregistered device example.com/gpu, which is unexpected":                                     false,
		"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected":           false,
		"Resources cannot be allocated with Topology locality":                                                                                false,
		"": false,
	} {
		if got := DeviceCountRefusal(msg); got != want {
			t.Errorf("DeviceCountRefusal(%q) = %v, want %v", msg, got, want)
		}
	}
}

func TestDevicePreemptionUnsupported(t *testing.T) {
	defaults := NodeManagers{Topology: "none", CPU: "none", Memory: "None"}
	with := func(f func(*NodeManagers)) NodeManagers { m := defaults; f(&m); return m }
	for _, tc := range []struct {
		m          NodeManagers
		guaranteed bool
		want       string // a word of the reason; "" for supported
	}{
		{defaults, true, ""},
		{with(func(m *NodeManagers) { m.Topology = "best-effort" }), true, ""},
		{with(func(m *NodeManagers) { m.Topology = "restricted" }), false, `"restricted"`},
		{with(func(m *NodeManagers) { m.Topology = "single-numa-node" }), false, `"single-numa-node"`},
		// The static managers allocate for Guaranteed pods only.
		{with(func(m *NodeManagers) { m.CPU = "static" }), false, ""},
		{with(func(m *NodeManagers) { m.CPU = "static" }), true, "CPU manager"},
		{with(func(m *NodeManagers) { m.Memory = "Static" }), false, ""},
		{with(func(m *NodeManagers) { m.Memory = "Static" }), true, "memory manager"},
		// Unknown or unset: refused rather than guessed.
		{NodeManagers{}, false, "topology manager"},
		{with(func(m *NodeManagers) { m.CPU = "" }), false, "CPU manager"},
		{with(func(m *NodeManagers) { m.Memory = "none" }), false, "memory manager"},
		{with(func(m *NodeManagers) { m.Topology = "prefer-closest-numa" }), false, "topology manager"},
	} {
		got := DevicePreemptionUnsupported(tc.m, tc.guaranteed)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("DevicePreemptionUnsupported(%+v, guaranteed %v) = %q, want one naming %s", tc.m, tc.guaranteed, got, tc.want)
		}
	}
}
