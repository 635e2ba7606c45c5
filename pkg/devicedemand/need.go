package devicedemand

import (
	"sort"

	"github.com/critlet/critlet/pkg/victims"
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

// Shortfall returns what the free devices leave of need, as requirements
// for victim selection, in resource-name order so plans and messages are
// stable. A resource with no entry in free has no free devices.
// O(resources log resources).
func Shortfall(need, free map[string]int64) []victims.Requirement {
	var out []victims.Requirement
	for r, n := range need {
		if short := n - max(free[r], 0); short > 0 {
			out = append(out, victims.Requirement{Resource: r, Quantity: short})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// Frees returns how many devices preempting a pod frees: the distinct
// device IDs its containers hold (a device reused from an init container
// is listed under both). O(IDs).
func Frees(perContainer [][]string) int64 {
	seen := map[string]struct{}{}
	for _, ids := range perContainer {
		for _, id := range ids {
			seen[id] = struct{}{}
		}
	}
	return int64(len(seen))
}
