package victims

import (
	"math"
)

// referenceUpstream restates the stock kubelet's algorithm in its plainest
// form: every round rescans every pod. Tests compare Select against it on
// inputs far larger and stranger than the kubelet differential tests reach.
func referenceUpstream(reqs []Requirement, cands []Candidate) ([]int, error) {
	var be, bu, gu []int
	for i, c := range cands {
		switch c.QOS {
		case BestEffort:
			be = append(be, i)
		case Burstable:
			bu = append(bu, i)
		case Guaranteed:
			gu = append(gu, i)
		}
	}
	type req struct {
		j int
		q int64
	}
	var all []req
	for j, r := range reqs {
		all = append(all, req{j, r.Quantity})
	}
	subtract := func(list []req, pods ...int) []req {
		var out []req
		for _, r := range list {
			q := r.q
			for _, p := range pods {
				q -= cands[p].Requests[r.j]
				if q <= 0 {
					break
				}
			}
			if q > 0 {
				out = append(out, req{r.j, q})
			}
		}
		return out
	}
	cat := func(groups ...[]int) []int {
		var out []int
		for _, g := range groups {
			out = append(out, g...)
		}
		return out
	}
	byDistance := func(pods []int, list []req) []int {
		pods = append([]int(nil), pods...)
		var out []int
		for len(list) > 0 {
			bestDist, bestK := float64(len(list)+1), 0
			for k, p := range pods {
				d := 0.0
				for _, r := range list {
					if rest := float64(r.q - cands[p].Requests[r.j]); rest > 0 {
						d += math.Pow(rest/float64(r.q), 2)
					}
				}
				b := cands[pods[bestK]]
				smaller := cands[p].Memory < b.Memory || (cands[p].Memory == b.Memory && cands[p].CPU <= b.CPU)
				if d < bestDist || (d == bestDist && smaller) {
					bestDist, bestK = d, k
				}
			}
			chosen := pods[bestK]
			list = subtract(list, chosen)
			out = append(out, chosen)
			pods[bestK] = pods[len(pods)-1]
			pods = pods[:len(pods)-1]
		}
		return out
	}
	if rest := subtract(all, cat(be, bu, gu)...); len(rest) > 0 {
		e := &UnmetError{}
		for _, r := range rest {
			e.Unmet = append(e.Unmet, Requirement{Resource: reqs[r.j].Resource, Quantity: r.q})
		}
		return nil, e
	}
	gv := byDistance(gu, subtract(all, cat(be, bu)...))
	bv := byDistance(bu, subtract(all, cat(be, gv)...))
	ev := byDistance(be, subtract(all, cat(bv, gv)...))
	return cat(ev, bv, gv), nil
}
