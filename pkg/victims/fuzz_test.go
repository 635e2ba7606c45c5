package victims

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// decode turns fuzz bytes into a selection input. Values range from tiny to
// near the int64 limit and include negatives, so malformed input is
// exercised too.
func decode(data []byte) ([]Requirement, []Candidate) {
	next := func(n int) uint64 {
		var buf [8]byte
		copy(buf[:], data[:min(n, len(data))])
		data = data[min(n, len(data)):]
		return binary.LittleEndian.Uint64(buf[:])
	}
	value := func() int64 {
		switch tag := next(1); tag % 8 {
		case 0:
			return 0
		case 1:
			return int64(next(1))
		case 2:
			return int64(next(2))
		case 3:
			return -int64(next(1) % 3)
		case 4:
			return int64(next(8) >> 1) // up to MaxInt64
		default:
			return int64(next(4))
		}
	}
	dims := int(next(1) % 5)
	reqs := make([]Requirement, dims)
	for j := range reqs {
		reqs[j] = Requirement{Resource: fmt.Sprintf("r%d", j), Quantity: value()}
	}
	var cands []Candidate
	for len(data) > 0 && len(cands) < 512 {
		c := Candidate{QOS: QOSClass(next(1) % 4), Priority: int32(next(1)%5) - 1, Memory: value(), CPU: value()}
		if c.QOS == 0 && len(data)%3 != 0 {
			c.QOS = Burstable // keep malformed classes rare
		}
		for range dims {
			c.Requests = append(c.Requests, value())
		}
		cands = append(cands, c)
	}
	return reqs, cands
}

func valid(reqs []Requirement, cands []Candidate) bool {
	return validate(reqs, cands) == nil
}

// checkPlan verifies what any accepted plan must satisfy, and that a refusal
// is justified.
func checkPlan(t *testing.T, reqs []Requirement, cands []Candidate, plan []int, err error) {
	t.Helper()
	if err != nil {
		if plan != nil {
			t.Fatalf("error %v with a plan %v", err, plan)
		}
		var ue *UnmetError
		var ie *InputError
		switch {
		case errors.As(err, &ie):
			if valid(reqs, cands) {
				t.Fatalf("valid input refused: %v", err)
			}
		case errors.As(err, &ue):
			all := make([]int, len(cands))
			for i := range all {
				all[i] = i
			}
			if !covers(reqs, cands, all) {
				return
			}
			t.Fatalf("refused as unmet though all candidates cover the need: %v", err)
		default:
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		return
	}
	seen := map[int]bool{}
	for _, i := range plan {
		if i < 0 || i >= len(cands) || seen[i] {
			t.Fatalf("plan %v: bad or repeated index %d", plan, i)
		}
		seen[i] = true
	}
	if !covers(reqs, cands, plan) {
		t.Fatalf("plan %v does not cover %v", plan, reqs)
	}
}

// covers reports whether the pods' requests add up to every requirement,
// without overflowing.
func covers(reqs []Requirement, cands []Candidate, pods []int) bool {
	for j, r := range reqs {
		rest := r.Quantity
		for _, i := range pods {
			if rest <= 0 {
				break
			}
			rest -= cands[i].Requests[j]
		}
		if rest > 0 {
			return false
		}
	}
	return true
}

func FuzzSelect(f *testing.F) {
	f.Add([]byte{2, 1, 10, 5, 20, 2, 0, 4, 4, 1, 7, 1, 9})
	f.Add([]byte{1, 2, 0x10, 0x27, 3, 1, 100, 1, 100, 2, 0x10, 0x27, 1, 1, 1, 50})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, cands := decode(data)
		for _, policy := range Policies {
			plan, err := Select(policy, reqs, cands)
			checkPlan(t, reqs, cands, plan, err)
			again, err2 := Select(policy, reqs, cands)
			if !reflect.DeepEqual(plan, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
				t.Fatalf("%s: not deterministic: %v/%v then %v/%v", policy, plan, err, again, err2)
			}
			fewest, ferr := SelectFewest(policy, reqs, cands)
			checkPlan(t, reqs, cands, fewest, ferr)
			if (err == nil) != (ferr == nil) || len(fewest) > len(plan) {
				t.Fatalf("%s: SelectFewest %v/%v against Select %v/%v", policy, fewest, ferr, plan, err)
			}
			if err != nil || !valid(reqs, cands) {
				continue
			}
			switch policy {
			case PolicyUpstream:
				want, _ := referenceUpstream(reqs, cands)
				if len(want) != 0 || len(plan) != 0 {
					if !reflect.DeepEqual(plan, want) {
						t.Fatalf("upstream policy %v, reference %v", plan, want)
					}
				}
			case PolicyPriority:
				checkPriorityBound(t, reqs, cands, plan)
			}
		}
	})
}

// checkPriorityBound checks the priority policy's promise: the need cannot
// be met from pods of lower priority than the highest one it preempts.
func checkPriorityBound(t *testing.T, reqs []Requirement, cands []Candidate, plan []int) {
	t.Helper()
	if len(plan) == 0 {
		return
	}
	top := topPriority(cands, plan)
	var lower []int
	for i, c := range cands {
		if c.Priority < top {
			lower = append(lower, i)
		}
	}
	if covers(reqs, cands, lower) {
		t.Fatalf("preempted a pod of priority %d though pods below it cover the need", top)
	}
}

// topPriority is the highest priority among the planned victims.
func topPriority(cands []Candidate, plan []int) int32 {
	top := cands[plan[0]].Priority
	for _, i := range plan {
		top = max(top, cands[i].Priority)
	}
	return top
}
