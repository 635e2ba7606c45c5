package victims

import (
	"slices"
)

// The search of SelectFewest runs on the kubelet's sync loop, so it is
// bounded: maxTieSteps steps in all (a pick of one pod, or a combination
// of the passes' choices weighed, each O(pods × requirements)), and at
// most maxChoices choices kept per pass. Ties on real nodes take a few
// dozen steps; past the bound the best choice found so far stands, and
// Select's is always one.
const (
	maxTieSteps = 2048
	maxChoices  = 64
)

// SelectFewest is Select, except where the stock kubelet's rule meets a
// full tie: pods of one class at the same distance from what is still
// needed, with the same memory and cpu requests. The stock kubelet takes
// the one that comes last in its list of active pods, which it builds from
// a map, so its order, and with it how many pods later steps need, is
// chance. SelectFewest weighs every way of breaking such ties and returns,
// among the choices the rule can make, one with the fewest victims, then
// the least freed beyond the need (the sum, over the requirements, of the
// excess as a fraction of the need); on equal terms, the one the given
// order leads to, so without ties it returns exactly what Select does.
// Errors are Select's.
//
// Cost: Select's, then at most maxTieSteps steps, each O(pods ×
// len(reqs)) and, at a tie, O(tied pods × their distinct requests).
func SelectFewest(policy Policy, reqs []Requirement, cands []Candidate) ([]int, error) {
	return SelectFewestPreferring(policy, reqs, cands, nil)
}

// SelectFewestPreferring is SelectFewest with one more criterion, between
// the fewest victims and the least excess: the most candidates that
// preferred marks (nil marks none). A resumed preemption prefers the
// victims an earlier kubelet already signalled.
func SelectFewestPreferring(policy Policy, reqs []Requirement, cands []Candidate, preferred []bool) ([]int, error) {
	return byPolicy(policy, reqs, cands, func(keep func(int) bool) ([]int, error) {
		return selectUpstreamFewest(reqs, cands, keep, preferred)
	})
}

// selectUpstreamFewest is selectUpstream weighing every choice of its
// three passes (Guaranteed, Burstable, BestEffort) that ties allow.
func selectUpstreamFewest(reqs []Requirement, cands []Candidate, keep func(int) bool, preferred []bool) ([]int, error) {
	s := &tieSearch{cands: cands, preferred: preferred, steps: maxTieSteps}
	return s.selectUpstream(reqs, keep)
}

func (s *tieSearch) selectUpstream(reqs []Requirement, keep func(int) bool) ([]int, error) {
	cands, preferred := s.cands, s.preferred
	first, err := selectUpstream(reqs, cands, keep)
	if err != nil {
		return nil, err
	}
	var class [Guaranteed + 1][]int
	for i, c := range cands {
		if keep == nil || keep(i) {
			class[c.QOS] = append(class[c.QOS], i)
		}
	}
	need := needOf(reqs)
	be, bu, gu := class[BestEffort], class[Burstable], class[Guaranteed]
	score := func(plan []int) planScore {
		sc := planScore{victims: len(plan), excess: excess(need, cands, plan)}
		for _, i := range plan {
			if i < len(preferred) && preferred[i] {
				sc.preferred++
			}
		}
		return sc
	}
	best, bestScore := first, score(first)
	// Each combination weighed is a step: the passes' choices multiply.
	for _, guVictims := range s.choices(gu, freedBy(need, cands, be, bu)) {
		for _, buVictims := range s.choices(bu, freedBy(need, cands, be, guVictims)) {
			for _, beVictims := range s.choices(be, freedBy(need, cands, buVictims, guVictims)) {
				if !s.spend() {
					return best, nil
				}
				out := slices.Concat(beVictims, buVictims, guVictims)
				if sc := score(out); sc.better(bestScore) {
					best, bestScore = out, sc
				}
			}
		}
	}
	return best, nil
}

// planScore is what SelectFewestPreferring weighs a plan by.
type planScore struct {
	victims, preferred int
	excess             float64
}

// better reports whether s is strictly better than o: fewer victims, then
// more preferred ones, then less excess.
func (s planScore) better(o planScore) bool {
	if s.victims != o.victims {
		return s.victims < o.victims
	}
	if s.preferred != o.preferred {
		return s.preferred > o.preferred
	}
	return s.excess < o.excess
}

// excess is how much victims free beyond need: per requirement, the excess
// as a fraction of the need, summed.
func excess(need []int64, cands []Candidate, victims []int) float64 {
	total := 0.0
	for j, n := range need {
		if n <= 0 {
			continue
		}
		var freed int64
		for _, i := range victims {
			// Requests are bounded by the need's type; a sum past it is
			// excess all the same.
			if freed += cands[i].Requests[j]; freed < 0 {
				freed = 1<<63 - 1
			}
		}
		if freed > n {
			total += float64(freed-n) / float64(n)
		}
	}
	return total
}

// tieSearch walks the choices of closest that ties allow, within a budget
// of steps shared by all its walks.
type tieSearch struct {
	cands     []Candidate
	preferred []bool
	steps     int // left
	walked    int // steps taken by walk, for the tests
}

// spend takes one step, and reports false when none is left.
func (s *tieSearch) spend() bool {
	if s.steps <= 0 {
		return false
	}
	s.steps--
	return true
}

// choices returns the victim lists closest can pick from pods for need in
// some order of them, each set of pods once, at most maxChoices, as far as
// the budget goes (none once it is spent). Which order leads to which does not matter: the
// caller starts from Select's own choice and replaces it only with a
// strictly better one.
func (s *tieSearch) choices(pods []int, need []int64) [][]int {
	var out [][]int
	seen := map[string]bool{}
	s.walk(slices.Clone(pods), slices.Clone(need), nil, &out, seen)
	return out
}

// walk picks pods from at until need is met, branching at each full tie.
func (s *tieSearch) walk(at []int, need []int64, chosen []int, out *[][]int, seen map[string]bool) {
	s.walked++
	if len(*out) >= maxChoices || !s.spend() {
		return
	}
	if !open(need) {
		key := setKey(chosen)
		if !seen[key] {
			seen[key] = true
			*out = append(*out, slices.Clone(chosen))
		}
		return
	}
	ties := s.tied(at, need)
	if len(ties) == 0 {
		// Cannot happen: the passes are only asked for what their pods
		// cover.
		return
	}
	type branch struct {
		requests  []int64
		preferred bool
	}
	var tried []branch
	for _, k := range ties {
		// Every frame on the stack loops over its ties: stop them all as
		// soon as the budget is spent, not only the next call.
		if len(*out) >= maxChoices || s.steps <= 0 {
			return
		}
		p := at[k]
		// Pods with the same requests, both preferred or neither, lead to
		// plans of the same score.
		b := branch{s.cands[p].Requests, p < len(s.preferred) && s.preferred[p]}
		if slices.ContainsFunc(tried, func(t branch) bool { return t.preferred == b.preferred && slices.Equal(t.requests, b.requests) }) {
			continue
		}
		tried = append(tried, b)
		rest := slices.Delete(slices.Clone(at), k, k+1)
		left := slices.Clone(need)
		for j := range left {
			if left[j] > 0 {
				left[j] = max(left[j]-s.cands[p].Requests[j], 0)
			}
		}
		s.walk(rest, left, append(chosen, p), out, seen)
	}
}

// tied returns the positions in at of the pods the stock kubelet could
// take next for need, whatever their order: nearest, then smallest memory,
// then smallest cpu.
func (s *tieSearch) tied(at []int, need []int64) []int {
	var ties []int
	var bestDist float64
	var bestMem, bestCPU int64
	for k := range at {
		c := &s.cands[at[k]]
		d := distance(need, c.Requests)
		switch {
		case len(ties) == 0 || d < bestDist ||
			d == bestDist && (c.Memory < bestMem || c.Memory == bestMem && c.CPU < bestCPU):
			ties = append(ties[:0], k)
			bestDist, bestMem, bestCPU = d, c.Memory, c.CPU
		case d == bestDist && c.Memory == bestMem && c.CPU == bestCPU:
			ties = append(ties, k)
		}
	}
	return ties
}

// setKey names a set of candidate indexes.
func setKey(pods []int) string {
	sorted := slices.Clone(pods)
	slices.Sort(sorted)
	b := make([]byte, 0, 4*len(sorted))
	for _, i := range sorted {
		b = append(b, byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
	}
	return string(b)
}
