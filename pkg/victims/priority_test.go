package victims

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestPriorityPolicyProperties checks the priority policy on random nodes:
// it never preempts a pod of priority p while pods below p cover the need;
// it refuses exactly when the upstream policy does; among the pods at or
// below the lowest sufficient priority it decides as the upstream policy;
// with a single priority on the node it is the upstream policy.
func TestPriorityPolicyProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cases := 10000
	if testing.Short() {
		cases = 1000
	}
	var spared int
	for c := range cases {
		reqs, cands := genNode(r, 1+r.IntN(80), 1+r.IntN(3), c%2 == 0)
		if c%5 == 0 {
			for i := range cands {
				cands[i].Priority = 7
			}
		}
		plan, err := Select(PolicyPriority, reqs, cands)
		up, upErr := Select(PolicyUpstream, reqs, cands)
		if (err == nil) != (upErr == nil) {
			t.Fatalf("case %d: priority policy error %v, upstream %v", c, err, upErr)
		}
		if err != nil {
			continue
		}
		checkPlan(t, reqs, cands, plan, nil)
		checkPriorityBound(t, reqs, cands, plan)
		if len(plan) == 0 {
			continue
		}
		top := topPriority(cands, plan)
		var keep []int
		for i, cand := range cands {
			if cand.Priority <= top {
				keep = append(keep, i)
			}
		}
		sub := make([]Candidate, len(keep))
		for k, i := range keep {
			sub[k] = cands[i]
		}
		want, _ := referenceUpstream(reqs, sub)
		for k := range want {
			want[k] = keep[want[k]]
		}
		if !reflect.DeepEqual(plan, want) {
			t.Fatalf("case %d: priority policy %v, upstream rules on pods up to priority %d %v", c, plan, top, want)
		}
		if c%5 == 0 && !reflect.DeepEqual(plan, up) {
			t.Fatalf("case %d: one priority on the node, yet %v differs from upstream %v", c, plan, up)
		}
		if len(keep) < len(cands) {
			spared++
		}
	}
	if spared < cases/10 {
		t.Fatalf("only %d cases spared higher-priority pods: generator too narrow", spared)
	}
}

func TestPriorityPolicyExamples(t *testing.T) {
	big := func(p int32, qos QOSClass) Candidate {
		return Candidate{QOS: qos, Priority: p, Requests: []int64{1000}, Memory: 1000, CPU: 100}
	}
	small := func(p int32, qos QOSClass) Candidate {
		return Candidate{QOS: qos, Priority: p, Requests: []int64{400}, Memory: 400, CPU: 100}
	}
	tests := []struct {
		name  string // equal pods go last-first, as upstream breaks full ties
		cands []Candidate
		need  int64
		want  []int
	}{
		{"two low-priority Guaranteed pods before one high-priority BestEffort", []Candidate{big(100, BestEffort), small(0, Guaranteed), small(0, Guaranteed)}, 800, []int{2, 1}},
		{"upstream would take the BestEffort pod", []Candidate{big(100, BestEffort), small(0, Guaranteed), small(0, Guaranteed)}, 800, nil},
		{"the high-priority pod when the low ones cannot cover", []Candidate{big(100, BestEffort), small(0, Guaranteed)}, 800, []int{0}},
		{"negative priorities go first", []Candidate{small(0, BestEffort), small(-5, Guaranteed), small(-5, Guaranteed)}, 800, []int{2, 1}},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs := []Requirement{{"memory", tc.need}}
			policy := PolicyPriority
			want := tc.want
			if k == 1 {
				policy, want = PolicyUpstream, []int{0}
			}
			got, err := Select(policy, reqs, tc.cands)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, %v; want %v", got, err, want)
			}
		})
	}
}

// BenchmarkSelect compares the policies on the same candidates: the
// priority policy runs the upstream rules on a subset.
func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{110, 1000, 5000} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		reqs, cands := genNode(r, n, 2, false)
		var total [2]int64
		for _, c := range cands {
			total[0] += c.Requests[0]
			total[1] += c.Requests[1]
		}
		reqs[0].Quantity, reqs[1].Quantity = total[0]/3, total[1]/3
		for _, policy := range Policies {
			b.Run(fmt.Sprintf("policy=%s/pods=%d", policy, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Select(policy, reqs, cands); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
