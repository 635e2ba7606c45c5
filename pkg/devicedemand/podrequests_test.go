package devicedemand

import (
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// TestNeedOfANewPodIsItsEffectiveRequest checks Need, for a pod that holds
// nothing, against upstream's own effective-request rule
// (component-helpers' PodRequests: the peak of the init phase, sidecars
// included, against the app containers plus the sidecars), which the
// scheduler and the kubelet's resource predicate apply to extended
// resources: the devices a pod draws are what it was scheduled with.
func TestNeedOfANewPodIsItsEffectiveRequest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	resources := []string{gpu, vf}
	for i := range 5000 {
		pod := randomPod(rng, resources)
		got, err := Need(pod)
		if err != nil {
			t.Fatal(err)
		}
		reqs := resourcehelper.PodRequests(apiPod(pod), resourcehelper.PodResourcesOptions{})
		for _, r := range resources {
			q := reqs[v1.ResourceName(r)]
			if got[r] != q.Value() {
				t.Fatalf("pod %d %s: Need[%s] = %d, PodRequests = %s", i, describe(pod), r, got[r], q.String())
			}
		}
	}
}

func apiPod(pod []Container) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	p := &v1.Pod{}
	for _, c := range pod {
		ac := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
		for r, n := range c.Devices {
			ac.Resources.Requests[v1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
			ac.Resources.Limits[v1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
		}
		switch c.Kind {
		case Sidecar:
			ac.RestartPolicy = &always
			p.Spec.InitContainers = append(p.Spec.InitContainers, ac)
		case Init:
			p.Spec.InitContainers = append(p.Spec.InitContainers, ac)
		default:
			p.Spec.Containers = append(p.Spec.Containers, ac)
		}
	}
	return p
}
