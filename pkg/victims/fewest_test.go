package victims

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// permutations calls f with every order of 0..n-1.
func permutations(n int, f func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			f(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// upstreamChoices runs Select on cands in every order (the stock kubelet's
// list of active pods comes from a map) and returns the victims' sets it
// makes, as original indexes, by setKey, and the best score any has.
func upstreamChoices(t *testing.T, policy Policy, reqs []Requirement, cands []Candidate, score func([]int) planScore) (map[string]bool, planScore) {
	t.Helper()
	out := map[string]bool{}
	var best planScore
	permuted := make([]Candidate, len(cands))
	permutations(len(cands), func(p []int) {
		for k, i := range p {
			permuted[k] = cands[i]
		}
		plan, err := Select(policy, reqs, permuted)
		if err != nil {
			t.Fatalf("Select in order %v: %v", p, err)
		}
		orig := make([]int, len(plan))
		for k, i := range plan {
			orig[k] = p[i]
		}
		// The order the search promises, spelled out here rather than
		// taken from planScore.better, which it checks.
		sc := score(orig)
		if len(out) == 0 || sc.victims < best.victims ||
			sc.victims == best.victims && (sc.preferred > best.preferred || sc.preferred == best.preferred && sc.excess < best.excess) {
			best = sc
		}
		out[setKey(orig)] = true
	})
	return out, best
}

// genDeviceHolders makes a node of pods alike but for the devices they
// hold (one or two device resources, 0 to 3 of each), short of a few
// devices: every pick past the first is likely a full tie.
func genDeviceHolders(r *rand.Rand) ([]Requirement, []Candidate) {
	reqs := []Requirement{{Resource: "example.com/gpu"}, {Resource: "example.com/nic"}}[:1+r.IntN(2)]
	cands := make([]Candidate, 3+r.IntN(4))
	total := make([]int64, len(reqs))
	for i := range cands {
		c := Candidate{QOS: Burstable, Memory: 64 << 20, CPU: 100, Requests: make([]int64, len(reqs))}
		if r.IntN(4) == 0 {
			c.QOS = BestEffort
		}
		for j := range reqs {
			c.Requests[j] = r.Int64N(4)
			total[j] += c.Requests[j]
		}
		cands[i] = c
	}
	for j := range reqs {
		reqs[j].Quantity = 1 + r.Int64N(max(total[j], 1))
	}
	return reqs, cands
}

// SelectFewestPreferring makes one of the choices the stock kubelet's rule
// makes in some order of the pods, the best any order gives (fewest
// victims, then most preferred, then least excess); where the given order
// does as well, exactly Select's plan. On nodes full of pods alike the
// given order often costs more victims, or spares a preferred pod, where
// another would not.
func TestSelectFewestIsUpstreamsBestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 43))
	var fewerThanGiven, morePreferred, cases int
	for trial := 0; trial < 600; trial++ {
		reqs, cands := genNode(r, 2+r.IntN(5), 1+r.IntN(3), true)
		if trial%2 == 0 {
			reqs, cands = genDeviceHolders(r)
		}
		var preferred []bool
		if trial%3 != 0 {
			preferred = make([]bool, len(cands))
			for i := range preferred {
				preferred[i] = r.IntN(2) == 0
			}
		}
		score := func(plan []int) planScore {
			sc := planScore{victims: len(plan), excess: excess(needOf(reqs), cands, plan)}
			for _, i := range plan {
				if preferred != nil && preferred[i] {
					sc.preferred++
				}
			}
			return sc
		}
		for _, policy := range Policies {
			got, err := SelectFewestPreferring(policy, reqs, cands, preferred)
			given, gerr := Select(policy, reqs, cands)
			if (err == nil) != (gerr == nil) {
				t.Fatalf("trial %d %s: SelectFewestPreferring err %v, Select err %v", trial, policy, err, gerr)
			}
			var unmet *UnmetError
			if err != nil {
				if !errors.As(err, &unmet) {
					t.Fatalf("trial %d %s: %v", trial, policy, err)
				}
				continue
			}
			cases++
			choices, best := upstreamChoices(t, policy, reqs, cands, score)
			if !choices[setKey(got)] {
				t.Fatalf("trial %d %s: chose %v, which no order of the pods leads the stock rule to\nreqs %+v\ncands %+v", trial, policy, got, reqs, cands)
			}
			if sc := score(got); sc != best {
				t.Fatalf("trial %d %s: chose %v scoring %+v, an order of the pods gives %+v\nreqs %+v\ncands %+v\npreferred %v", trial, policy, got, sc, best, reqs, cands, preferred)
			}
			if score(given) == best && !slices.Equal(got, given) {
				t.Fatalf("trial %d %s: the given order is as good as any, yet chose %v where Select chose %v", trial, policy, got, given)
			}
			switch g, b := score(given), score(got); {
			case g.victims > b.victims:
				fewerThanGiven++
			case g.victims == b.victims && g.preferred < b.preferred:
				morePreferred++
			}
		}
	}
	// The checks above cannot pass by the search being Select: ties cost
	// victims, or spare preferred pods, in the given order this often.
	if fewerThanGiven < 10 || morePreferred < 10 {
		t.Errorf("in %d cases the search took fewer victims than the given order %d times, more preferred ones %d times: the nodes drawn no longer tell them apart", cases, fewerThanGiven, morePreferred)
	}
	t.Logf("%d cases, %d with fewer victims than the given order, %d with more preferred ones", cases, fewerThanGiven, morePreferred)
}

// A full tie whose break decides the next class's pass: the Burstable pass
// is asked for the gpu the BestEffort pod cannot free, and both Burstable
// pods free it at distance 0. The stock kubelet takes the later one, which
// holds no nic, so the BestEffort pod goes too; the earlier one frees the
// nic as well, and is the only victim.
func TestSelectFewestBreaksATieForFewerVictims(t *testing.T) {
	reqs := []Requirement{{Resource: "example.com/gpu", Quantity: 1}, {Resource: "example.com/nic", Quantity: 1}}
	pod := func(qos QOSClass, gpu, nic int64) Candidate {
		return Candidate{QOS: qos, Requests: []int64{gpu, nic}, Memory: 64 << 20, CPU: 100}
	}
	cands := []Candidate{pod(Burstable, 2, 2), pod(BestEffort, 0, 1), pod(Burstable, 3, 0)}
	if got, err := Select(PolicyUpstream, reqs, cands); err != nil || !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Select = %v, %v; want the stock kubelet's [1 2]", got, err)
	}
	for _, policy := range Policies {
		if got, err := SelectFewest(policy, reqs, cands); err != nil || !slices.Equal(got, []int{0}) {
			t.Errorf("SelectFewest(%s) = %v, %v; want [0]", policy, got, err)
		}
	}
}

// adversarialTies is a node on which unbounded tie-breaking explodes: one
// BestEffort pod and n Burstable pods each holding a gpu and a different
// count of nics (kinds of them), alike otherwise, gpus short; with
// guaranteed, the Burstable pods are Guaranteed behind a Burstable pass
// instead.
func adversarialTies(n, kinds int, gpus int64, guaranteed bool) ([]Requirement, []Candidate) {
	reqs := []Requirement{{Resource: "example.com/gpu", Quantity: gpus}, {Resource: "example.com/nic", Quantity: 1}}
	cands := []Candidate{{QOS: BestEffort, Requests: []int64{0, 1}}}
	for i := range n {
		c := Candidate{QOS: Burstable, Memory: 64 << 20, CPU: 100, Requests: []int64{1, int64(i % kinds)}}
		if guaranteed {
			c.QOS = Guaranteed
		}
		cands = append(cands, c)
	}
	if guaranteed {
		cands = append(cands, Candidate{QOS: Burstable, Memory: 64 << 20, CPU: 100, Requests: []int64{1, 0}})
	}
	return reqs, cands
}

// The search is bounded: on nodes where weighing every tie explodes, it
// takes no more than its steps, keeps no more than its choices per pass,
// and returns a valid plan no larger than Select's.
func TestSelectFewestStaysWithinItsBudget(t *testing.T) {
	for _, c := range []struct {
		n, kinds   int
		gpus       int64
		guaranteed bool
	}{
		{100, 97, 20, false}, {300, 97, 20, false}, {150, 97, 20, true},
		// Every pod a kind of its own, many short: deep and wide.
		{300, 300, 150, false},
		// Few pods, every one needed: every order is a choice.
		{11, 11, 11, false},
	} {
		reqs, cands := adversarialTies(c.n, c.kinds, c.gpus, c.guaranteed)
		s := &tieSearch{cands: cands, steps: maxTieSteps}
		plan, err := s.selectUpstream(reqs, nil)
		checkPlan(t, reqs, cands, plan, err)
		// Each pass's walk past the budget stops at its first call.
		if bound := maxTieSteps + 3; s.walked > bound {
			t.Errorf("%d pods of %d kinds, %d gpus short (guaranteed %v): %d calls of walk, want at most %d", c.n, c.kinds, c.gpus, c.guaranteed, s.walked, bound)
		}
		if given, _ := Select(PolicyUpstream, reqs, cands); len(plan) > len(given) {
			t.Errorf("%d pods: %d victims, more than Select's %d", c.n, len(plan), len(given))
		}
	}
}

// A large node of pods alike but for their devices: the search stays
// within its budget (a test that ends) and its plan is valid and no
// larger than Select's.
func TestSelectFewestOnALargeNodeOfTies(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	reqs := []Requirement{{Resource: "example.com/gpu", Quantity: 40}, {Resource: "example.com/nic", Quantity: 40}}
	cands := make([]Candidate, 500)
	for i := range cands {
		cands[i] = Candidate{QOS: QOSClass(1 + r.IntN(3)), Memory: 64 << 20, CPU: 100, Requests: []int64{r.Int64N(4), r.Int64N(4)}}
	}
	for _, policy := range Policies {
		plan, err := Select(policy, reqs, cands)
		fewest, ferr := SelectFewest(policy, reqs, cands)
		checkPlan(t, reqs, cands, fewest, ferr)
		if err != nil || ferr != nil || len(fewest) > len(plan) {
			t.Fatalf("%s: SelectFewest %d victims (%v) against Select's %d (%v)", policy, len(fewest), ferr, len(plan), err)
		}
	}
}

// The search's cost against Select's, on a node of 110 pods with ties and
// on the adversarial node of 300.
func BenchmarkSelectFewestTies(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 9))
	reqs := []Requirement{{Resource: "example.com/gpu", Quantity: 12}, {Resource: "example.com/nic", Quantity: 12}}
	cands := make([]Candidate, 110)
	for i := range cands {
		cands[i] = Candidate{QOS: QOSClass(1 + r.IntN(3)), Memory: 64 << 20, CPU: 100, Requests: []int64{r.Int64N(4), r.Int64N(4)}}
	}
	advReqs, advCands := adversarialTies(300, 300, 150, false)
	for _, node := range []struct {
		name  string
		reqs  []Requirement
		cands []Candidate
	}{{"ties", reqs, cands}, {"adversarial", advReqs, advCands}} {
		for _, f := range []struct {
			name string
			sel  func(Policy, []Requirement, []Candidate) ([]int, error)
		}{{"Select", Select}, {"SelectFewest", SelectFewest}} {
			b.Run(node.name+"/"+f.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := f.sel(PolicyUpstream, node.reqs, node.cands); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
