// Package devicewait decides which pods refused at admission wait for a
// device plugin instead of failing, and when each is tried again or refused
// for good. After a kubelet restart or a node reboot the kubelet admits its
// pods before the device plugins have registered again, and the stock
// kubelet fails every pod needing their devices for good
// (kubernetes#117955, #125579, #133382). Within a window after the kubelet
// starts, such a pod is held: tried again once every resource it waits for
// is registered with healthy devices, refused with its last reason once
// the window has closed. With critical-device-preemption, a critical pod
// whose victims are terminating is held the same way, without the window,
// and tried again at every housekeeping (HoldPreempting).
//
// The package holds no kubelet state and does no I/O: the kubelet passes
// the time, what the device manager offers, and each refusal; it runs the
// admissions itself. Holds is not safe for concurrent use: the kubelet
// calls it from its sync loop, where admissions run.
package devicewait

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/readmission"
)

// The device manager's refusals while a resource's plugin is away: not
// registered (again), or registered with no healthy device. Other handlers
// refuse with the same reason (UnexpectedAdmissionError), and the device
// manager for other causes, so the message tells them apart.
var pluginAwayErrors = []string{
	"cannot allocate unregistered device ",
	"no healthy devices present; cannot allocate unhealthy devices ",
}

// AwayPlugin returns the resource whose plugin is away when message, an
// admission refusal's, is the device manager's refusal for one; ok is
// false otherwise. The pod waits for that resource only: the device
// manager names the first it cannot allocate, and a resource the pod
// requests without a device plugin (a node's extended resource) is never
// registered, so waiting for every resource without healthy devices would
// wait for ever. A pod short of two plugins is refused for the second once
// the first is back, and waits for it then. O(len(message)).
func AwayPlugin(message string) (resource string, ok bool) {
	for _, e := range pluginAwayErrors {
		i := strings.Index(message, e)
		if i < 0 {
			continue
		}
		rest := message[i+len(e):]
		// A resource name is a qualified name: letters, digits, '-', '_',
		// '.' and one '/'; the refusal's wording follows it.
		end := strings.IndexFunc(rest, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r))
		})
		if end < 0 {
			end = len(rest)
		}
		if name := strings.TrimRight(rest[:end], "."); name != "" {
			return name, true
		}
	}
	return "", false
}

// WithoutHealthyDevices returns, sorted, the device-plugin resources the
// containers ask devices of (devicedemand.Containers, with only the
// resources the device manager knows: their plugins registered) that have
// no healthy device. Under the topology manager's restricted and
// single-numa-node policies a pod short of such a resource is refused
// before the device manager allocates: the device manager has no hint
// for it, and the refusal is TopologyAffinityError, which names no
// resource; these are the ones it waits for. O(containers × resources).
func WithoutHealthyDevices(containers []devicedemand.Container, healthy map[string]int64) []string {
	out := sets.New[string]()
	for _, c := range containers {
		for r := range c.Devices {
			if healthy[r] == 0 {
				out.Insert(r)
			}
		}
	}
	return sets.List(out)
}

// Held is a pod waiting for device plugins, or for the pods preempted for
// its devices to terminate.
type Held struct {
	UID types.UID
	// Waiting lists the resources it waits for: the one its last refusal
	// named (AwayPlugin), or those a topology refusal hides
	// (WithoutHealthyDevices).
	Waiting []string
	// Preempting: it waits for the pods preempted for it (or for another
	// pod) to terminate, however long their grace periods, not for the
	// window; it is tried again at every Next.
	Preempting bool
	// Reason and Message are its last refusal's, as upstream gave them.
	Reason, Message string
	// Since is its first refusal; Retries counts the attempts refused since.
	Since   time.Time
	Retries int
}

type held struct {
	Held
	next time.Time
}

// Holds are the pods held in one kubelet's window.
type Holds struct {
	closes  time.Time
	backoff readmission.Backoff
	pods    map[types.UID]*held
	// order keeps pods in order of first refusal, as the kubelet admits
	// pods by creation time.
	order []types.UID
}

// New returns the holds of a kubelet started at start, holding pods for
// window after it; b spaces the attempts of a pod whose plugins are back
// but which is refused for them again.
func New(start time.Time, window time.Duration, b readmission.Backoff) *Holds {
	return &Holds{closes: start.Add(window), backoff: b, pods: map[types.UID]*held{}}
}

// Closes returns when the window closes.
func (h *Holds) Closes() time.Time { return h.closes }

// Hold records that pod uid was refused at now, waiting for the resources
// waiting, and reports whether it is held (for device plugins). It is not held once the window
// has closed or when it waits for nothing: the caller refuses it as the
// stock kubelet does (and forgets it, if it was held). A pod held already
// (an attempt refused again) keeps its first refusal's time and waits one
// backoff step more. O(1) but for the first hold, O(held).
func (h *Holds) Hold(uid types.UID, waiting []string, reason, message string, now time.Time) bool {
	if len(waiting) == 0 || !now.Before(h.closes) {
		return false
	}
	p, ok := h.pods[uid]
	switch {
	case !ok:
		p = &held{Held: Held{UID: uid, Since: now}, next: now}
		h.pods[uid] = p
		h.order = append(h.order, uid)
	case p.Preempting:
		// Its retries were the preemption's: it begins to wait for the
		// plugin now.
		p.Retries, p.next = 0, now
	default:
		p.Retries++
		p.next = now.Add(h.backoff.After(p.Retries))
	}
	p.Waiting, p.Reason, p.Message, p.Preempting = slices.Clone(waiting), reason, message, false
	return true
}

// HoldPreempting records that pod uid was refused at now while pods
// preempted for devices terminate: it is held until the caller forgets it,
// window or not, and tried again at every Next. A pod held already keeps
// its first refusal's time. O(1) but for the first hold, O(held).
func (h *Holds) HoldPreempting(uid types.UID, reason, message string, now time.Time) {
	p, ok := h.pods[uid]
	if !ok {
		p = &held{Held: Held{UID: uid, Since: now}}
		h.pods[uid] = p
		h.order = append(h.order, uid)
	} else {
		p.Retries++
	}
	p.Waiting, p.Reason, p.Message, p.Preempting = nil, reason, message, true
}

// Next returns, oldest first, the held pods to try again at now (one
// Preempting, or one whose every awaited resource has a device in healthy
// and whose backoff is over) and, once the window has closed, every pod
// held for device plugins, to refuse with its last reason; those are
// forgotten. Pods to try stay held until the caller forgets them or holds
// them again. O(held × waited).
func (h *Holds) Next(now time.Time, healthy map[string]int64) (retry, refuse []Held) {
	closed := !now.Before(h.closes)
	kept := h.order[:0:0]
	for _, uid := range h.order {
		p := h.pods[uid]
		switch {
		case p.Preempting:
			retry = append(retry, p.Held)
		case closed:
			refuse = append(refuse, p.Held)
			delete(h.pods, uid)
			continue
		case !now.Before(p.next) && !slices.ContainsFunc(p.Waiting, func(res string) bool { return healthy[res] == 0 }):
			retry = append(retry, p.Held)
		}
		kept = append(kept, uid)
	}
	h.order = kept
	return retry, refuse
}

// All returns every held pod, oldest first. O(held).
func (h *Holds) All() []Held {
	out := make([]Held, 0, len(h.order))
	for _, uid := range h.order {
		out = append(out, h.pods[uid].Held)
	}
	return out
}

// Forget drops pod uid: admitted, refused, deleted or changed. O(held).
func (h *Holds) Forget(uid types.UID) {
	if _, ok := h.pods[uid]; !ok {
		return
	}
	delete(h.pods, uid)
	h.order = slices.DeleteFunc(h.order, func(u types.UID) bool { return u == uid })
}

// Has reports whether pod uid is held. O(1).
func (h *Holds) Has(uid types.UID) bool {
	_, ok := h.pods[uid]
	return ok
}

// Len returns how many pods are held.
func (h *Holds) Len() int { return len(h.pods) }
