package planning

import (
	"fmt"
	"strings"
)

// NodeManagers are a node's resource-manager policies as the kubelet's
// configuration names them (defaulted: none, none, None).
type NodeManagers struct {
	Topology, CPU, Memory string
}

// The device manager's refusal for too few free devices of a resource: the
// one refusal that freeing other pods' devices can turn into an allocation.
const deviceCountRefusal = "requested number of devices unavailable for "

// DeviceCountRefusal reports whether message, an admission refusal's, is
// the device manager's refusal for too few free devices. Unregistered or
// unhealthy devices, a changed request and every topology-manager refusal
// (TopologyAffinityError) are not. O(len(message)).
func DeviceCountRefusal(message string) bool {
	return strings.Contains(message, deviceCountRefusal)
}

// DevicePreemptionUnsupported returns why killing device holders could
// leave a pod short of devices still refused on a node of m (guaranteed:
// the pod's QoS class is Guaranteed), or "" when enough free devices admit
// it.
//
// Under the topology manager's none and best-effort policies no alignment
// refuses an allocation. Under restricted and single-numa-node the freed
// devices must also be NUMA-aligned with each other and with the pod's CPUs
// and memory. The static CPU and memory managers allocate after the device
// manager, from pools of their own, for Guaranteed pods only: a kill could
// free devices such a pod still cannot be given. critlet does not predict
// those managers' answers, so it does not preempt for devices there. A
// policy it does not know (none is left empty by a defaulted
// configuration) is refused the same way. O(1).
func DevicePreemptionUnsupported(m NodeManagers, guaranteed bool) string {
	switch m.Topology {
	case "none", "best-effort":
	case "restricted", "single-numa-node":
		return fmt.Sprintf("the topology manager's policy %q may refuse the freed devices for their NUMA alignment", m.Topology)
	default:
		return fmt.Sprintf("the topology manager's policy %q is not one critlet preempts for devices under", m.Topology)
	}
	if why := staticManager("CPU", "CPUs", m.CPU, "none", "static", guaranteed); why != "" {
		return why
	}
	return staticManager("memory", "memory", m.Memory, "None", "Static", guaranteed)
}

// staticManager returns why the resource manager called name under policy
// could refuse a pod (guaranteed: a Guaranteed one) whose devices were
// freed for it, or "": its none policy allocates nothing, its static
// policy allocates what for Guaranteed pods only.
func staticManager(name, what, policy, none, static string, guaranteed bool) string {
	switch {
	case policy == none, policy == static && !guaranteed:
		return ""
	case policy == static:
		return fmt.Sprintf("the %s manager's policy %q allocates a Guaranteed pod's %s after its devices and may refuse it with its victims gone", name, static, what)
	}
	return fmt.Sprintf("the %s manager's policy %q is not one critlet preempts for devices under", name, policy)
}
