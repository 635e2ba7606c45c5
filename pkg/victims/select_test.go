package victims

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// genNode makes a random node: sizes drawn from a small palette when
// tieHeavy (many identical pods), otherwise from wide ranges.
func genNode(r *rand.Rand, n, dims int, tieHeavy bool) ([]Requirement, []Candidate) {
	names := []string{"cpu", "memory", "ephemeral-storage", "pods", "example.com/gpu"}
	reqs := make([]Requirement, dims)
	perm := r.Perm(len(names))
	for j := range reqs {
		reqs[j].Resource = names[perm[j%len(names)]]
	}
	palette := [][2]int64{{0, 0}, {100, 128 << 20}, {250, 256 << 20}, {500, 512 << 20}, {1000, 1 << 30}, {2000, 4 << 30}}
	total := make([]int64, dims)
	cands := make([]Candidate, n)
	for i := range cands {
		c := Candidate{QOS: QOSClass(1 + r.IntN(3)), Priority: int32(r.IntN(5)) - 1, Requests: make([]int64, dims)}
		if tieHeavy {
			p := palette[r.IntN(len(palette))]
			c.CPU, c.Memory = p[0], p[1]
		} else {
			c.CPU, c.Memory = r.Int64N(3000), r.Int64N(8<<30)
		}
		for j := range c.Requests {
			switch reqs[j].Resource {
			case "cpu":
				c.Requests[j] = c.CPU
			case "memory":
				c.Requests[j] = c.Memory
			case "pods":
				c.Requests[j] = 1
			default:
				if tieHeavy {
					c.Requests[j] = r.Int64N(3)
				} else {
					c.Requests[j] = r.Int64N(1 << 20)
				}
			}
			total[j] += c.Requests[j]
		}
		cands[i] = c
	}
	for j := range reqs {
		// Mostly coverable needs, sometimes not, sometimes already met.
		switch k := r.IntN(20); {
		case k == 0:
			reqs[j].Quantity = total[j] + 1 + r.Int64N(10)
		case k == 1:
			reqs[j].Quantity = -r.Int64N(3)
		default:
			reqs[j].Quantity = 1 + r.Int64N(max(total[j]*int64(1+r.IntN(9))/10, 1))
		}
	}
	return reqs, cands
}

func TestSelectUpstreamMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := 20000
	if testing.Short() {
		cases = 2000
	}
	var withVictims, unmet int
	for c := range cases {
		n := 1 + r.IntN(60)
		if c%50 == 0 {
			n = 200 + r.IntN(400)
		}
		reqs, cands := genNode(r, n, 1+r.IntN(4), c%3 == 0)
		got, gotErr := Select(PolicyUpstream, reqs, cands)
		want, wantErr := referenceUpstream(reqs, cands)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("case %d: error %v, reference %v", c, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("case %d: reqs %v\nvictims   %v\nreference %v", c, reqs, got, want)
		}
		if wantErr != nil {
			unmet++
		} else if len(want) > 0 {
			withVictims++
		}
	}
	t.Logf("%d cases: %d with victims, %d unmet", cases, withVictims, unmet)
	if withVictims < cases/2 || unmet == 0 {
		t.Fatalf("generator too narrow: %d with victims, %d unmet of %d", withVictims, unmet, cases)
	}
}

func TestSelectRejectsMalformedInput(t *testing.T) {
	reqs := []Requirement{{"memory", 10}}
	tests := []struct {
		name  string
		cands []Candidate
	}{
		{"negative request", []Candidate{{QOS: Burstable, Requests: []int64{-1}}}},
		{"missing request", []Candidate{{QOS: Burstable}}},
		{"no qos class", []Candidate{{Requests: []int64{20}}}},
		{"negative memory", []Candidate{{QOS: Burstable, Requests: []int64{20}, Memory: -3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Select(PolicyUpstream, reqs, tc.cands)
			var ie *InputError
			if !errors.As(err, &ie) || got != nil {
				t.Fatalf("got %v, %v; want nil and an InputError", got, err)
			}
		})
	}
	if _, err := Select("largest-first", reqs, nil); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
