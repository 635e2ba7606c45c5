package victims

import (
	"slices"
	"testing"
)

// A node whose victims depend on the rounding of each squared fraction
// before it is summed: a fused multiply-add (arm64; amd64 from GOAMD64=v3)
// picks pods 0, 1, 2 and 4 here, the stock kubelet 0, 2, 3 and 4. CI runs
// this package on all three code generators.
func TestNearTieNodeMatchesStockOnEveryArchitecture(t *testing.T) {
	const mi = 1 << 20
	reqs := []Requirement{{"cpu", 500}, {"memory", 1280 * mi}}
	pod := func(q QOSClass, cpu, memMi int64) Candidate {
		return Candidate{QOS: q, CPU: cpu, Memory: memMi * mi, Requests: []int64{cpu, memMi * mi}}
	}
	cands := []Candidate{
		pod(Burstable, 250, 320),
		pod(Burstable, 450, 256),
		pod(Burstable, 300, 384),
		pod(Burstable, 550, 192),
		pod(Burstable, 250, 384),
		pod(Guaranteed, 550, 128),
	}
	got, err := Select(PolicyUpstream, reqs, cands)
	if err != nil {
		t.Fatal(err)
	}
	sorted := slices.Sorted(slices.Values(got))
	if want := []int{0, 2, 3, 4}; !slices.Equal(sorted, want) {
		t.Fatalf("victims %v, want the stock kubelet's %v", got, want)
	}
	ref, err := referenceUpstream(reqs, cands)
	if err != nil || !slices.Equal(got, ref) {
		t.Fatalf("victims %v, reference %v (%v)", got, ref, err)
	}
}
