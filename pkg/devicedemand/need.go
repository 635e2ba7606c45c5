package devicedemand

import (
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Need returns, per resource, how many devices not yet allocated to any pod
// allocating every container in order takes. Only resources the pod takes
// new devices of appear. It returns an *InputError for an unknown kind, a
// negative count, or a held count that differs from the request.
// O(containers × resources log resources).
func Need(containers []Container) (map[string]int64, error) {
	need := map[string]int64{}
	err := allocate(containers, func(s step) bool {
		if s.fresh > 0 {
			need[s.resource] += s.fresh
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return need, nil
}

// Unavailable is where the device manager first refuses a pod: the
// container, the resource, and why.
type Unavailable struct {
	Container string
	Resource  string
	// NoHealthy: the resource has no healthy device, which the device
	// manager checks before counting.
	NoHealthy bool
	// Requested is how many new devices the container takes (after what it
	// draws from the pod's reuse pool), Available how many healthy ones no
	// pod holds; Requested > Available.
	Requested, Available int64
}

// FirstUnavailable walks containers as the device manager allocates them
// and returns its first refusal, or nil when every container gets its
// devices. healthy[r] counts r's healthy devices, free[r] those no pod
// holds (free is not changed). Within a container, resources are taken
// in name order; the device manager takes them in a map's order, so for a
// container short of two resources it may name either. It returns an
// *InputError as Need does. O(containers × resources log resources).
func FirstUnavailable(containers []Container, healthy, free map[string]int64) (*Unavailable, error) {
	left := maps.Clone(free)
	var out *Unavailable
	err := allocate(containers, func(s step) bool {
		switch {
		case healthy[s.resource] <= 0:
			out = &Unavailable{Container: s.container, Resource: s.resource, NoHealthy: true}
		case s.fresh > left[s.resource]:
			out = &Unavailable{Container: s.container, Resource: s.resource, Requested: s.fresh, Available: max(left[s.resource], 0)}
		default:
			left[s.resource] -= s.fresh
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// step is one resource of one container as the device manager allocates
// it: fresh is how many devices no pod held before it takes (none for a
// container that holds its own).
type step struct {
	container, resource string
	fresh               int64
}

// allocate walks containers in the device manager's order, a container's
// resources in name order, keeping the pod's reuse pool, and calls take for
// each step until take returns false.
func allocate(containers []Container, take func(step) bool) error {
	// reusable[r] is the size of the device manager's reuse pool for this
	// pod: devices of finished init containers no later container kept yet.
	reusable := map[string]int64{}
	for _, c := range containers {
		if c.Kind < Init || c.Kind > App {
			return &InputError{Container: c.Name, Reason: "unknown kind " + c.Kind.String()}
		}
		for r := range c.Held {
			if _, asked := c.Devices[r]; !asked {
				return &InputError{Container: c.Name, Resource: r, Reason: "holds devices it does not ask for"}
			}
		}
		for _, r := range slices.Sorted(maps.Keys(c.Devices)) {
			want := c.Devices[r]
			if want < 0 {
				return &InputError{Container: c.Name, Resource: r, Reason: "negative device count"}
			}
			held, isHeld := c.Held[r]
			if isHeld && held != want {
				return &InputError{Container: c.Name, Resource: r,
					Reason: "holds a different number of devices than it asks for"}
			}
			// The pool is drawn from first; the rest is new devices.
			fromPool := min(want, reusable[r])
			fresh := want - fromPool
			s := step{container: c.Name, resource: r}
			if !isHeld {
				s.fresh = fresh
			}
			if !take(s) {
				return nil
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
	}
	return nil
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
	capacity, used := map[string]int64{}, map[string]int64{}
	for r := range need {
		ids := sets.New(healthy[r]...)
		capacity[r] = int64(ids.Len())
		used[r] = int64(ids.Intersection(sets.New(held[r]...)).Len())
	}
	return ShortagesOf(need, capacity, used)
}

// ShortagesOf is Shortages from counts: capacity[r] healthy devices of r,
// used[r] of them held by active pods. O(resources log resources).
func ShortagesOf(need, capacity, used map[string]int64) []Shortage {
	var out []Shortage
	for r, n := range need {
		if n <= 0 {
			continue
		}
		s := Shortage{Resource: r, Requested: n, Used: used[r], Capacity: capacity[r]}
		if s.Missing() > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}
