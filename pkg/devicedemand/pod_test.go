package devicedemand

import (
	"math/rand/v2"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Containers reads back what apiPod wrote, kinds, order and held devices
// included, and leaves out resources that are not device-plugin ones.
func TestContainersReadsThePodAsTheDeviceManagerDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	isDevice := func(r string) bool { return r == gpu || r == vf }
	for i := range 2000 {
		want := randomPod(rng, []string{gpu, vf})
		for k := range want {
			want[k].Held = map[string]int64{}
			for r, n := range want[k].Devices {
				if n > 0 && rng.IntN(3) == 0 {
					want[k].Held[r] = n
				}
			}
		}
		pod := apiPod(want)
		// Not device-plugin resources: ignored.
		for k := range pod.Spec.Containers {
			pod.Spec.Containers[k].Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
			pod.Spec.Containers[k].Resources.Limits["example.com/plain"] = resource.MustParse("1")
		}
		byName := map[string]map[string]int64{}
		for _, c := range want {
			byName[c.Name] = c.Held
		}
		got := Containers(pod, isDevice, func(name string) map[string]int64 {
			h := map[string]int64{"example.com/zero": 0}
			for r, n := range byName[name] {
				h[r] = n
			}
			return h
		})
		for k := range want {
			if want[k].Devices == nil {
				want[k].Devices = map[string]int64{}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pod %d: Containers = %+v, want %+v", i, got, want)
		}
	}
}
