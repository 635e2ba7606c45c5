package victims

import (
	"fmt"
	"math"
	"sort"
)

// Select returns the candidates to preempt, as indexes into cands in the
// order they should be preempted, so that their requests cover every
// requirement. It returns an *UnmetError when even all candidates together
// cannot cover the need, and an *InputError for malformed input; in both
// cases nothing may be preempted.
func Select(policy Policy, reqs []Requirement, cands []Candidate) ([]int, error) {
	return byPolicy(policy, reqs, cands, func(keep func(int) bool) ([]int, error) {
		return selectUpstream(reqs, cands, keep)
	})
}

// byPolicy validates the input and has pick choose among the candidates
// policy lets go (keep; nil for all): every one under PolicyUpstream;
// under PolicyPriority those at or below the lowest priority whose
// candidates cover the need, or every one when none does or nothing is
// needed (the upstream rule reports both the same way).
func byPolicy(policy Policy, reqs []Requirement, cands []Candidate, pick func(keep func(int) bool) ([]int, error)) ([]int, error) {
	if err := validate(reqs, cands); err != nil {
		return nil, err
	}
	switch policy {
	case PolicyUpstream:
		return pick(nil)
	case PolicyPriority:
		return pick(priorityCeiling(reqs, cands))
	}
	_, err := ParsePolicy(string(policy))
	return nil, err
}

func validate(reqs []Requirement, cands []Candidate) error {
	for i, c := range cands {
		if c.QOS < BestEffort || c.QOS > Guaranteed {
			return &InputError{Candidate: i, Reason: fmt.Sprintf("unknown QoS class %v", c.QOS)}
		}
		if len(c.Requests) != len(reqs) {
			return &InputError{Candidate: i, Reason: fmt.Sprintf("%d requests for %d requirements", len(c.Requests), len(reqs))}
		}
		for j, v := range c.Requests {
			if v < 0 {
				return &InputError{Candidate: i, Reason: fmt.Sprintf("negative request %d for %s", v, reqs[j].Resource)}
			}
		}
		if c.Memory < 0 || c.CPU < 0 {
			return &InputError{Candidate: i, Reason: fmt.Sprintf("negative memory (%d) or cpu (%d) request", c.Memory, c.CPU)}
		}
	}
	return nil
}

// selectUpstream is the stock kubelet's choice among the candidates that
// keep(i) allows (all when keep is nil): preempt Guaranteed pods only for
// what all Burstable and BestEffort pods together cannot free, then
// Burstable pods for what BestEffort pods and the chosen Guaranteed ones
// cannot, then BestEffort pods for the rest. The result lists BestEffort,
// then Burstable, then Guaranteed victims, each in the order chosen.
func selectUpstream(reqs []Requirement, cands []Candidate, keep func(int) bool) ([]int, error) {
	var class [Guaranteed + 1][]int
	for i, c := range cands {
		if keep == nil || keep(i) {
			class[c.QOS] = append(class[c.QOS], i)
		}
	}
	need := needOf(reqs)
	be, bu, gu := class[BestEffort], class[Burstable], class[Guaranteed]

	if rest := freedBy(need, cands, be, bu, gu); open(rest) {
		return nil, unmet(reqs, rest)
	}
	// The check above guarantees that each pass can finish: the pods it may
	// take cover what the other classes leave.
	guVictims, err := closest(cands, gu, freedBy(need, cands, be, bu))
	if err != nil {
		return nil, err
	}
	buVictims, err := closest(cands, bu, freedBy(need, cands, be, guVictims))
	if err != nil {
		return nil, err
	}
	beVictims, err := closest(cands, be, freedBy(need, cands, buVictims, guVictims))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(beVictims)+len(buVictims)+len(guVictims))
	out = append(out, beVictims...)
	out = append(out, buVictims...)
	return append(out, guVictims...), nil
}

// freedBy returns what remains of need once the given pods are preempted, with
// met requirements at 0. It stops subtracting once a requirement is met, so
// huge requests cannot overflow.
func freedBy(need []int64, cands []Candidate, groups ...[]int) []int64 {
	rest := append([]int64(nil), need...)
	for j := range rest {
		for _, g := range groups {
			for _, i := range g {
				if rest[j] <= 0 {
					break
				}
				rest[j] -= cands[i].Requests[j]
			}
		}
		rest[j] = max(rest[j], 0)
	}
	return rest
}

// needOf returns the requirements' quantities, with met ones (<= 0) at 0.
func needOf(reqs []Requirement) []int64 {
	need := make([]int64, len(reqs))
	for j, r := range reqs {
		need[j] = max(r.Quantity, 0)
	}
	return need
}

func open(rest []int64) bool {
	for _, v := range rest {
		if v > 0 {
			return true
		}
	}
	return false
}

// closest picks pods of one class, in the given order, until need is met:
// each round the pod nearest the remaining need (see distance), ties going
// to the smaller pod.
func closest(cands []Candidate, pods []int, need []int64) ([]int, error) {
	if !open(need) {
		return nil, nil
	}
	dims := len(need)
	x := make([]int64, len(pods)*dims)
	memory := make([]int64, len(pods))
	cpu := make([]int64, len(pods))
	for k, i := range pods {
		copy(x[k*dims:], cands[i].Requests)
		memory[k], cpu[k] = cands[i].Memory, cands[i].CPU
	}
	ix := newIndex(dims, x, memory, cpu, need)
	var out []int
	for open(need) {
		p := ix.best(need)
		if p < 0 {
			return nil, fmt.Errorf("victims: candidates ran out with %v still needed", need)
		}
		out = append(out, pods[p])
		for j := range need {
			if need[j] > 0 {
				need[j] = max(need[j]-x[int(p)*dims+j], 0)
			}
		}
		ix.remove(p)
	}
	return out, nil
}

func unmet(reqs []Requirement, rest []int64) *UnmetError {
	e := &UnmetError{}
	for j, v := range rest {
		if v > 0 {
			e.Unmet = append(e.Unmet, Requirement{Resource: reqs[j].Resource, Quantity: v})
		}
	}
	return e
}

// priorityCeiling returns which candidates PolicyPriority may take: those
// at or below the lowest priority P whose candidates cover the need. Any
// pod it preempts then has priority <= P, and the need cannot be met
// below P, so no pod is preempted where pods of lower priority alone
// would do. nil (every candidate) when no priority covers the need, or
// nothing is needed.
func priorityCeiling(reqs []Requirement, cands []Candidate) (keep func(int) bool) {
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cands[order[a]].Priority < cands[order[b]].Priority })
	need := needOf(reqs)
	ceiling := int64(math.MinInt64)
	rest := need
	for k := 0; k < len(order) && open(rest); {
		p := cands[order[k]].Priority
		var tier []int
		for ; k < len(order) && cands[order[k]].Priority == p; k++ {
			tier = append(tier, order[k])
		}
		rest = freedBy(rest, cands, tier)
		ceiling = int64(p)
	}
	if open(rest) || ceiling == math.MinInt64 {
		return nil
	}
	return func(i int) bool { return int64(cands[i].Priority) <= ceiling }
}

// Remaining returns reqs less what the given candidates free, each quantity
// floored at 0 (met). Re-planning uses it with the victims that did
// terminate.
func Remaining(reqs []Requirement, cands []Candidate, freed []int) []Requirement {
	rest := freedBy(needOf(reqs), cands, freed)
	out := make([]Requirement, len(reqs))
	for j, r := range reqs {
		out[j] = Requirement{Resource: r.Resource, Quantity: rest[j]}
	}
	return out
}

// Met reports whether no requirement is left open.
func Met(reqs []Requirement) bool {
	for _, r := range reqs {
		if r.Quantity > 0 {
			return false
		}
	}
	return true
}
