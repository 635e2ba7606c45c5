package localnode

import (
	"context"
)

// part says which nodes run a component and who starts it.
type part int

const (
	// partControlPlane components run on a full node only; UpRuntime starts them.
	partControlPlane part = iota
	// partRuntime components run on every node; UpRuntime starts them.
	partRuntime
	// partAgent is the kubelet: StartKubelet starts it, and a node is complete
	// without it until then.
	partAgent
)

// component is one process of the node. Start, verify (a node found
// running), status, stop (Down) and the checks of a node's remains all
// read the one table below, so a component is described once.
type component struct {
	name string
	part part
	// start starts it and waits until healthy; nil for the agent.
	start func(*Node, context.Context) error
	// healthy checks a running one, as start checks a new one; nil for the
	// agent (the node's Ready condition checks it).
	healthy func(*Node, context.Context) error
	// healthyMeans says what healthy checks, for its error.
	healthyMeans string
	// port is the TCP port it must be listening on itself; nil for none.
	port func(Config) int
	// beforeStop and afterStop, when set, run around its stop in Down.
	beforeStop, afterStop func(*Node) error
}

// components in start order; Down stops them in reverse.
var components = []component{
	{name: Etcd, part: partControlPlane, start: (*Node).startEtcd, healthy: (*Node).etcdHealthy, healthyMeans: "healthy",
		port: func(c Config) int { return c.Ports.EtcdClient }},
	{name: APIServer, part: partControlPlane, start: (*Node).startAPIServer, healthy: (*Node).apiServerReady, healthyMeans: "ready",
		port: func(c Config) int { return c.Ports.APIServer }},
	{name: Containerd, part: partRuntime, start: (*Node).startContainerd, healthy: (*Node).criServing, healthyMeans: "serving CRI",
		beforeStop: removeSandboxesBeforeContainerd, afterStop: killShimsAfterContainerd},
	{name: Kubelet, part: partAgent, afterStop: killJoinedAfterKubelet},
}

// base returns the components UpRuntime starts and a node needs running
// before its kubelet: the runtime's, and the control plane's unless the
// node is RuntimeOnly.
func (c Config) base() []component {
	var out []component
	for _, comp := range components {
		if comp.part == partRuntime || comp.part == partControlPlane && !c.RuntimeOnly {
			out = append(out, comp)
		}
	}
	return out
}
