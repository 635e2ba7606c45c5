package devicedemand

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Need returns, per resource, how many devices not yet allocated to any pod
// allocating every container in order takes. Only resources the pod takes
// new devices of appear. It returns an *InputError for an unknown kind, a
// negative count, or a held count that differs from the request.
// O(containers × resources).
func Need(containers []Container) (map[string]int64, error) {
	// reusable[r] is the size of the device manager's reuse pool for this
	// pod: devices of finished init containers no later container kept yet.
	reusable := map[string]int64{}
	need := map[string]int64{}
	for _, c := range containers {
		if c.Kind < Init || c.Kind > App {
			return nil, &InputError{Container: c.Name, Reason: "unknown kind " + c.Kind.String()}
		}
		for r, want := range c.Devices {
			if want < 0 {
				return nil, &InputError{Container: c.Name, Resource: r, Reason: "negative device count"}
			}
			held, isHeld := c.Held[r]
			if isHeld && held != want {
				return nil, &InputError{Container: c.Name, Resource: r,
					Reason: "holds a different number of devices than it asks for"}
			}
			// The pool is drawn from first; the rest is new devices.
			fromPool := min(want, reusable[r])
			fresh := want - fromPool
			if !isHeld && fresh > 0 {
				need[r] += fresh
			}
			switch c.Kind {
			case Init:
				// Its devices join the pool: the ones it drew are there
				// already, the fresh ones are added.
				reusable[r] += fresh
			default:
				// It keeps what it drew from the pool.
				reusable[r] -= fromPool
			}
		}
		for r := range c.Held {
			if _, asked := c.Devices[r]; !asked {
				return nil, &InputError{Container: c.Name, Resource: r, Reason: "holds devices it does not ask for"}
			}
		}
	}
	return need, nil
}

// Shortage is a device-plugin resource a pod's admission lacks devices of,
// in the terms of the kubelet's InsufficientResourceError, so it joins the
// predicate's shortfall in one victim selection.
type Shortage struct {
	Resource string
	// Requested is how many devices not yet allocated the pod takes (Need).
	Requested int64
	// Used is how many healthy devices active pods hold.
	Used int64
	// Capacity is how many healthy devices there are.
	Capacity int64
}

// Missing is how many more devices must be freed: Requested less the free
// ones, as InsufficientResourceError.GetInsufficientAmount counts.
func (s Shortage) Missing() int64 { return s.Requested - (s.Capacity - s.Used) }

// Shortages returns the resources of need that healthy devices not held
// leave short, in resource-name order so plans and messages are stable.
// healthy[r] lists the healthy device IDs of r, held[r] the IDs active pods
// hold (repeats allowed: a device reused from an init container is listed
// under both). A held device that is not healthy frees nothing when its
// holder goes, so it counts in neither Used nor Capacity.
// O(IDs + resources log resources).
func Shortages(need map[string]int64, healthy, held map[string][]string) []Shortage {
	var out []Shortage
	for r, n := range need {
		if n <= 0 {
			continue
		}
		capacity := sets.New(healthy[r]...)
		used := int64(capacity.Intersection(sets.New(held[r]...)).Len())
		s := Shortage{Resource: r, Requested: n, Used: used, Capacity: int64(capacity.Len())}
		if s.Missing() > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}
