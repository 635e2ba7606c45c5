// Package devicedemand works out how many free devices of each
// device-plugin resource admitting a pod takes, counting as the kubelet's
// device manager allocates: container by container, init containers
// first, a regular init container's devices reused by the containers after
// it, a sidecar's and an app container's kept for the pod's life, and a
// container that already holds its devices taking none. It is the pure
// core the device patches build their shortfall from; it sees counts only
// and does no I/O.
package devicedemand

import "fmt"

// Kind says what the device manager does with a container's devices once
// they are allocated.
type Kind uint8

const (
	// Init is a regular init container: it ends before the next container
	// starts, so the containers after it reuse its devices.
	Init Kind = iota + 1
	// Sidecar is a restartable init container: it keeps its devices while
	// the pod runs, so none are reused from it.
	Sidecar
	// App is an app container: it keeps its devices.
	App
)

func (k Kind) String() string {
	switch k {
	case Init:
		return "init"
	case Sidecar:
		return "sidecar"
	case App:
		return "app"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Container is one container of the pod, in the order the device manager
// allocates: the init containers (regular and sidecars) in spec order, then
// the app containers.
type Container struct {
	Name string
	Kind Kind
	// Devices[r] is how many devices of device-plugin resource r the
	// container asks for (its limit; requests of extended resources equal
	// their limits).
	Devices map[string]int64
	// Held[r] is how many devices of r the device manager already holds for
	// this container: a container restarted, or allocated before an earlier
	// attempt at the pod failed on a later one. It takes no new devices of
	// r, and must hold exactly what it asks for (the device manager refuses
	// a changed request).
	Held map[string]int64
}

// InputError says a container is malformed or its request changed; the
// device manager would refuse the pod, so there is no demand to meet.
type InputError struct {
	Container string
	Resource  string
	Reason    string
}

func (e *InputError) Error() string {
	if e.Resource == "" {
		return fmt.Sprintf("container %q: %s", e.Container, e.Reason)
	}
	return fmt.Sprintf("container %q, resource %s: %s", e.Container, e.Resource, e.Reason)
}
