// Package victims chooses which pods to preempt so that a critical pod fits.
//
// It is the pure core of critical-pod admission: it sees candidates only as
// request vectors with a QoS class and a priority, returns a plan as indexes
// into its input, and does no I/O. The kubelet side (pkg/kubelet/preemption)
// turns pods into candidates and carries the plan out.
package victims

import (
	"fmt"
	"strings"
)

// QOSClass is a candidate's quality-of-service class. The zero value is not a
// class, so a candidate whose class was never set is reported, not guessed.
type QOSClass uint8

const (
	BestEffort QOSClass = iota + 1
	Burstable
	Guaranteed
)

func (c QOSClass) String() string {
	switch c {
	case BestEffort:
		return "BestEffort"
	case Burstable:
		return "Burstable"
	case Guaranteed:
		return "Guaranteed"
	}
	return fmt.Sprintf("QOSClass(%d)", uint8(c))
}

// Requirement is one resource the critical pod lacks and by how much, in the
// resource's base unit (millicores for cpu, bytes for memory, a count for
// pods and extended resources). A quantity <= 0 is already met.
type Requirement struct {
	Resource string
	Quantity int64
}

// Candidate is a pod that may be preempted.
type Candidate struct {
	QOS QOSClass
	// Priority is the pod's priority; a pod without one counts as 0.
	Priority int32
	// Requests[j] is what preempting the pod frees of Requirements[j].Resource;
	// never negative.
	Requests []int64
	// Memory (bytes) and CPU (millicores) requests order otherwise equal
	// choices: the smaller pod goes first, whatever the requirements are.
	Memory int64
	CPU    int64
}

// Policy names a victim-ranking policy.
type Policy string

const (
	// PolicyUpstream decides exactly as the stock kubelet: QoS classes first
	// (Guaranteed pods are spared as far as Burstable and BestEffort ones can
	// cover the need, then Burstable ones), and within a class the pod closest
	// to the remaining need, fewest pods first.
	PolicyUpstream Policy = "upstream"
	// PolicyPriority never preempts a pod of priority p while the need can be
	// met from pods of lower priority; among the pods it may take, it decides
	// as PolicyUpstream.
	PolicyPriority Policy = "priority"
)

// Policies lists every known policy.
var Policies = []Policy{PolicyUpstream, PolicyPriority}

// ParsePolicy returns the policy named s, or an error listing the known ones.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown preemption policy %q: want one of %s", s, strings.Join(names, ", "))
}

// UnmetError says the candidates cannot cover the need even all together.
// Nothing may be preempted then.
type UnmetError struct {
	// Unmet lists, in requirement order, what would still be missing after
	// preempting every candidate.
	Unmet []Requirement
}

// Error matches the stock kubelet's text, which ends up in the rejected
// pod's status message.
func (e *UnmetError) Error() string {
	return "no set of running pods found to reclaim resources: " + FormatRequirements(e.Unmet)
}

// FormatRequirements renders reqs as the stock kubelet does in its logs and
// errors.
func FormatRequirements(reqs []Requirement) string {
	var b strings.Builder
	b.WriteString("[")
	for _, r := range reqs {
		fmt.Fprintf(&b, "(res: %s, q: %d), ", r.Resource, r.Quantity)
	}
	b.WriteString("]")
	return b.String()
}

// InputError says a candidate or requirement is malformed. Selection refuses
// the whole input rather than guess.
type InputError struct {
	Candidate int // index of the offending candidate, or -1
	Reason    string
}

func (e *InputError) Error() string {
	if e.Candidate < 0 {
		return "invalid preemption input: " + e.Reason
	}
	return fmt.Sprintf("invalid preemption candidate %d: %s", e.Candidate, e.Reason)
}
