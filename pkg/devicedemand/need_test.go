package devicedemand

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

const gpu, vf = "example.com/gpu", "example.com/vf"

func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		containers []Container
		want       map[string]int64
	}{
		{"nothing asked", []Container{{Name: "a", Kind: App}}, map[string]int64{}},
		{"app containers add up", []Container{
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 2}},
			{Name: "b", Kind: App, Devices: map[string]int64{gpu: 1, vf: 3}},
		}, map[string]int64{gpu: 3, vf: 3}},
		{"an init container's devices are reused", []Container{
			{Name: "i", Kind: Init, Devices: map[string]int64{gpu: 2}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 3}},
		}, map[string]int64{gpu: 3}},
		{"reused once only: the second app container takes new ones", []Container{
			{Name: "i", Kind: Init, Devices: map[string]int64{gpu: 2}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 2}},
			{Name: "b", Kind: App, Devices: map[string]int64{gpu: 2}},
		}, map[string]int64{gpu: 4}},
		{"init containers reuse each other's", []Container{
			{Name: "i1", Kind: Init, Devices: map[string]int64{gpu: 2}},
			{Name: "i2", Kind: Init, Devices: map[string]int64{gpu: 3}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 1}},
		}, map[string]int64{gpu: 3}},
		{"a sidecar keeps what it drew from the pool", []Container{
			{Name: "i", Kind: Init, Devices: map[string]int64{gpu: 2}},
			{Name: "s", Kind: Sidecar, Devices: map[string]int64{gpu: 1}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 2}},
		}, map[string]int64{gpu: 3}},
		{"a sidecar's devices are not reused", []Container{
			{Name: "s", Kind: Sidecar, Devices: map[string]int64{gpu: 2}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 2}},
		}, map[string]int64{gpu: 4}},
		{"held containers take nothing new but still feed the pool", []Container{
			{Name: "i", Kind: Init, Devices: map[string]int64{gpu: 2}, Held: map[string]int64{gpu: 2}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 3}},
		}, map[string]int64{gpu: 1}},
		{"held for one resource, new for another", []Container{
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 1, vf: 2}, Held: map[string]int64{gpu: 1}},
		}, map[string]int64{vf: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Need(tc.containers)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Need = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNeedRefusesWhatTheDeviceManagerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Container
		res  string
	}{
		{"unknown kind", Container{Name: "x", Kind: 9}, ""},
		{"zero kind", Container{Name: "x"}, ""},
		{"negative count", Container{Name: "x", Kind: App, Devices: map[string]int64{gpu: -1}}, gpu},
		{"changed request", Container{Name: "x", Kind: App, Devices: map[string]int64{gpu: 2}, Held: map[string]int64{gpu: 1}}, gpu},
		{"held, not asked", Container{Name: "x", Kind: App, Held: map[string]int64{vf: 1}}, vf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Need([]Container{tc.c})
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("Need = %v, %v; want an *InputError", got, err)
			}
			if ie.Container != "x" || ie.Resource != tc.res {
				t.Errorf("error names container %q resource %q, want %q %q (%v)", ie.Container, ie.Resource, "x", tc.res, err)
			}
		})
	}
}

func TestShortages(t *testing.T) {
	ids := func(s ...string) []string { return s }
	need := map[string]int64{gpu: 3, vf: 2, "example.com/fpga": 1, "example.com/none": 0}
	healthy := map[string][]string{gpu: ids("g0", "g1", "g2", "g3"), vf: ids("v0", "v1", "v2"), "example.com/other": ids("o0")}
	// g1 is listed twice (an init container's device reused); g9 is held but
	// unhealthy; v-devices are free enough.
	held := map[string][]string{gpu: ids("g0", "g1", "g1", "g2", "g9"), vf: ids("v0")}
	want := []Shortage{
		{Resource: "example.com/fpga", Requested: 1, Used: 0, Capacity: 0},
		{Resource: gpu, Requested: 3, Used: 3, Capacity: 4},
	}
	got := Shortages(need, healthy, held)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Shortages = %+v, want %+v", got, want)
	}
	if got[1].Missing() != 2 || got[0].Missing() != 1 {
		t.Errorf("Missing = %d, %d; want 1 (no fpga at all) and 2 (one gpu free, three asked)", got[0].Missing(), got[1].Missing())
	}
	if got := Shortages(map[string]int64{gpu: 1}, map[string][]string{gpu: ids("g0", "g0")}, map[string][]string{gpu: ids("g0")}); len(got) != 1 || got[0].Capacity != 1 || got[0].Used != 1 {
		t.Errorf("a healthy device listed twice counts once: %+v", got)
	}
	if got := Shortages(map[string]int64{gpu: 2}, healthy, map[string][]string{gpu: ids("g0", "g1")}); got != nil {
		t.Errorf("met need: Shortages = %+v, want none", got)
	}
}

// TestNeedMatchesDeviceIDModel checks the counting against a model that
// allocates device IDs step by step as the device manager's Allocate does
// (a reuse pool per pod, pre-allocated containers skipped), on random pods:
// once from scratch, and again with the containers before a failed one
// already holding their devices.
func TestNeedMatchesDeviceIDModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	resources := []string{gpu, vf}
	for i := range 5000 {
		pod := randomPod(rng, resources)
		m := newIDModel()
		m.allocate(pod)
		got, err := Need(pod)
		if err != nil {
			t.Fatal(err)
		}
		if !sameCounts(got, m.fresh) {
			t.Fatalf("pod %d %s: Need = %v, model drew %v", i, describe(pod), got, m.fresh)
		}

		// An earlier attempt allocated the first k containers; the retry
		// starts with a new pool, as after another pod's admission.
		k := rng.IntN(len(pod) + 1)
		retry := make([]Container, len(pod))
		copy(retry, pod)
		for j := range k {
			retry[j].Held = map[string]int64{}
			for r, ids := range m.held[j] {
				retry[j].Held[r] = int64(len(ids))
			}
		}
		again := newIDModel()
		again.next = m.next
		for j := range k {
			again.held[j] = m.held[j]
		}
		again.allocate(retry)
		got, err = Need(retry)
		if err != nil {
			t.Fatal(err)
		}
		if !sameCounts(got, again.fresh) {
			t.Fatalf("pod %d %s, first %d held: Need = %v, model drew %v", i, describe(retry), k, got, again.fresh)
		}
	}
}

func randomPod(rng *rand.Rand, resources []string) []Container {
	var pod []Container
	inits, apps := rng.IntN(4), 1+rng.IntN(3)
	for i := range inits + apps {
		c := Container{Name: fmt.Sprint("c", i), Kind: App}
		if i < inits {
			c.Kind = Init
			if rng.IntN(3) == 0 {
				c.Kind = Sidecar
			}
		}
		c.Devices = map[string]int64{}
		for _, r := range resources {
			if rng.IntN(3) > 0 {
				c.Devices[r] = int64(rng.IntN(4))
			}
		}
		pod = append(pod, c)
	}
	return pod
}

// idModel allocates device IDs per container as the device manager does.
type idModel struct {
	next  int
	pool  map[string]map[string]bool
	held  map[int]map[string][]string
	fresh map[string]int64
}

func newIDModel() *idModel {
	return &idModel{pool: map[string]map[string]bool{}, held: map[int]map[string][]string{}, fresh: map[string]int64{}}
}

func (m *idModel) allocate(pod []Container) {
	for j, c := range pod {
		if m.held[j] == nil {
			m.held[j] = map[string][]string{}
			for r, want := range c.Devices {
				var ids []string
				for id := range m.pool[r] {
					if int64(len(ids)) == want {
						break
					}
					if !contains(ids, id) {
						ids = append(ids, id)
					}
				}
				for int64(len(ids)) < want {
					m.next++
					ids = append(ids, fmt.Sprint(r, "-", m.next))
					m.fresh[r]++
				}
				m.held[j][r] = ids
			}
		}
		for r, ids := range m.held[j] {
			if m.pool[r] == nil {
				m.pool[r] = map[string]bool{}
			}
			for _, id := range ids {
				if c.Kind == Init {
					m.pool[r][id] = true
				} else {
					delete(m.pool[r], id)
				}
			}
		}
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func sameCounts(a, b map[string]int64) bool {
	for r, n := range a {
		if b[r] != n {
			return false
		}
	}
	for r, n := range b {
		if a[r] != n {
			return false
		}
	}
	return true
}

func describe(pod []Container) string {
	s := ""
	for _, c := range pod {
		s += fmt.Sprintf("[%s %s %v held %v]", c.Name, c.Kind, c.Devices, c.Held)
	}
	return s
}

func TestFirstUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name          string
		containers    []Container
		healthy, free map[string]int64
		want          *Unavailable
	}{
		{"fits", []Container{{Name: "a", Kind: App, Devices: map[string]int64{gpu: 2}}},
			map[string]int64{gpu: 4}, map[string]int64{gpu: 2}, nil},
		{"short", []Container{{Name: "a", Kind: App, Devices: map[string]int64{gpu: 3}}},
			map[string]int64{gpu: 4}, map[string]int64{gpu: 2}, &Unavailable{Container: "a", Resource: gpu, Requested: 3, Available: 2}},
		{"the second container counts what the first took", []Container{
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 1}},
			{Name: "b", Kind: App, Devices: map[string]int64{gpu: 2}},
		}, map[string]int64{gpu: 4}, map[string]int64{gpu: 2}, &Unavailable{Container: "b", Resource: gpu, Requested: 2, Available: 1}},
		{"what is drawn from the pool is not requested", []Container{
			{Name: "i", Kind: Init, Devices: map[string]int64{gpu: 1}},
			{Name: "a", Kind: App, Devices: map[string]int64{gpu: 3}},
		}, map[string]int64{gpu: 4}, map[string]int64{gpu: 2}, &Unavailable{Container: "a", Resource: gpu, Requested: 2, Available: 1}},
		{"no healthy device, even for none asked", []Container{{Name: "a", Kind: App, Devices: map[string]int64{gpu: 0}}},
			map[string]int64{gpu: 0}, map[string]int64{gpu: 0}, &Unavailable{Container: "a", Resource: gpu, NoHealthy: true}},
		{"resources in name order", []Container{{Name: "a", Kind: App, Devices: map[string]int64{vf: 5, gpu: 5}}},
			map[string]int64{gpu: 4, vf: 4}, map[string]int64{gpu: 1, vf: 1}, &Unavailable{Container: "a", Resource: gpu, Requested: 5, Available: 1}},
		{"more held than healthy leaves none available", []Container{{Name: "a", Kind: App, Devices: map[string]int64{gpu: 1}}},
			map[string]int64{gpu: 2}, map[string]int64{gpu: -1}, &Unavailable{Container: "a", Resource: gpu, Requested: 1, Available: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free := maps.Clone(tc.free)
			got, err := FirstUnavailable(tc.containers, tc.healthy, tc.free)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FirstUnavailable = %+v, want %+v", got, tc.want)
			}
			if !maps.Equal(free, tc.free) {
				t.Errorf("free changed: %v, was %v", tc.free, free)
			}
		})
	}
	if _, err := FirstUnavailable([]Container{{Name: "a", Kind: App, Devices: map[string]int64{gpu: -1}}}, nil, nil); err == nil {
		t.Error("a negative count: no error")
	}
}

// TestFirstUnavailableMatchesDeviceIDModel checks the refusal against the
// ID model allocating from a limited number of free devices: the same
// container and resource, the same counts, on random pods; and that a pod
// it lets through needs no more than is free.
func TestFirstUnavailableMatchesDeviceIDModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	resources := []string{gpu, vf}
	for i := range 5000 {
		pod := randomPod(rng, resources)
		healthy, free := map[string]int64{}, map[string]int64{}
		for _, r := range resources {
			healthy[r] = int64(rng.IntN(6))
			free[r] = int64(rng.IntN(int(healthy[r]) + 1))
		}
		got, err := FirstUnavailable(pod, healthy, free)
		if err != nil {
			t.Fatal(err)
		}
		want := modelRefusal(pod, healthy, free)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pod %d %s, healthy %v free %v: FirstUnavailable = %+v, model %+v", i, describe(pod), healthy, free, got, want)
		}
		if got == nil {
			need, _ := Need(pod)
			for r, n := range need {
				if n > free[r] {
					t.Fatalf("pod %d %s: let through needing %d %s of %d free", i, describe(pod), n, r, free[r])
				}
			}
		}
	}
}

// modelRefusal allocates IDs as idModel does, from budget[r] free devices,
// a container's resources in name order, and returns the first refusal.
func modelRefusal(pod []Container, healthy, budget map[string]int64) *Unavailable {
	m := newIDModel()
	for _, c := range pod {
		rs := make([]string, 0, len(c.Devices))
		for r := range c.Devices {
			rs = append(rs, r)
		}
		sort.Strings(rs)
		for _, r := range rs {
			if healthy[r] == 0 {
				return &Unavailable{Container: c.Name, Resource: r, NoHealthy: true}
			}
			want := c.Devices[r]
			var ids []string
			for id := range m.pool[r] {
				if int64(len(ids)) < want {
					ids = append(ids, id)
				}
			}
			if n := want - int64(len(ids)); n > budget[r]-m.fresh[r] {
				return &Unavailable{Container: c.Name, Resource: r, Requested: n, Available: budget[r] - m.fresh[r]}
			}
			for int64(len(ids)) < want {
				m.next++
				ids = append(ids, fmt.Sprint(r, "-", m.next))
				m.fresh[r]++
			}
			if m.pool[r] == nil {
				m.pool[r] = map[string]bool{}
			}
			for _, id := range ids {
				if c.Kind == Init {
					m.pool[r][id] = true
				} else {
					delete(m.pool[r], id)
				}
			}
		}
	}
	return nil
}
