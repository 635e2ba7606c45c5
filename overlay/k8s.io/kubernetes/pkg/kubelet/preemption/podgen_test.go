package preemption

import (
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	v1resource "k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

const (
	gpu          = v1.ResourceName("example.com/gpu")
	clusterCrit  = int32(2000000000)
	nodeCrit     = int32(2000001000)
	priorityUser = int32(1000000000)
	sourceFile   = kubetypes.FileSource
	mirrorKey    = kubetypes.ConfigMirrorAnnotationKey
	sourceKey    = kubetypes.ConfigSourceAnnotationKey
)

// nodeGen makes random nodes for differential tests and benchmarks.
type nodeGen struct {
	r *rand.Rand
	// tieHeavy draws sizes from a short palette so many pods share requests.
	tieHeavy bool
	// exotic adds init containers, sidecars, overhead, pod-level resources,
	// ephemeral storage, extended resources, static and mirror pods.
	exotic bool
	seq    int
}

var palette = []struct{ cpu, mem string }{
	{"100m", "128Mi"}, {"250m", "256Mi"}, {"500m", "512Mi"}, {"1", "1Gi"}, {"100m", "1Gi"}, {"2", "256Mi"},
}

func (g *nodeGen) quantity(res v1.ResourceName) resource.Quantity {
	r := g.r
	if g.tieHeavy {
		p := palette[r.IntN(len(palette))]
		switch res {
		case v1.ResourceCPU:
			return resource.MustParse(p.cpu)
		case v1.ResourceMemory:
			return resource.MustParse(p.mem)
		case gpu:
			return *resource.NewQuantity(int64(1+r.IntN(2)), resource.DecimalSI)
		default:
			return resource.MustParse("1Gi")
		}
	}
	switch res {
	case v1.ResourceCPU:
		if r.IntN(4) == 0 {
			// Fractions of a millicore round up.
			return *resource.NewScaledQuantity(int64(1+r.IntN(20000)), resource.Micro)
		}
		return *resource.NewMilliQuantity(int64(1+r.IntN(4000)), resource.DecimalSI)
	case v1.ResourceMemory:
		if r.IntN(6) == 0 {
			return *resource.NewMilliQuantity(int64(1+r.IntN(1<<20)), resource.BinarySI)
		}
		return *resource.NewQuantity(int64(1+r.IntN(8<<30)), resource.BinarySI)
	case gpu:
		return *resource.NewQuantity(int64(1+r.IntN(4)), resource.DecimalSI)
	default:
		return *resource.NewQuantity(int64(1+r.IntN(20<<30)), resource.BinarySI)
	}
}

// resources returns requirements of the given class for one container.
func (g *nodeGen) resources(class v1.PodQOSClass) v1.ResourceRequirements {
	r := g.r
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}
	if g.exotic && r.IntN(3) == 0 {
		names = append(names, v1.ResourceEphemeralStorage)
	}
	if g.exotic && r.IntN(5) == 0 {
		names = append(names, gpu)
	}
	var rr v1.ResourceRequirements
	switch class {
	case v1.PodQOSBestEffort:
		if g.exotic && r.IntN(4) == 0 {
			// Extended resources and storage alone leave a pod BestEffort.
			rr.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: g.quantity(v1.ResourceEphemeralStorage)}
		}
	case v1.PodQOSGuaranteed:
		rr.Requests, rr.Limits = v1.ResourceList{}, v1.ResourceList{}
		for _, n := range names {
			q := g.quantity(n)
			rr.Requests[n], rr.Limits[n] = q, q
		}
	default:
		rr.Requests = v1.ResourceList{}
		for _, n := range names {
			if r.IntN(3) > 0 {
				rr.Requests[n] = g.quantity(n)
			}
		}
		if len(rr.Requests) == 0 || r.IntN(3) == 0 {
			rr.Requests[v1.ResourceMemory] = g.quantity(v1.ResourceMemory)
			rr.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("8")}
		}
	}
	return rr
}

func (g *nodeGen) priority() *int32 {
	var p int32
	switch g.r.IntN(8) {
	case 0:
		return nil
	case 1:
		p = -int32(g.r.IntN(1000))
	case 2:
		p = clusterCrit
	case 3:
		p = priorityUser
	default:
		p = int32(g.r.IntN(3)) * 100
	}
	return &p
}

func (g *nodeGen) pod() *v1.Pod {
	r := g.r
	g.seq++
	class := []v1.PodQOSClass{v1.PodQOSBestEffort, v1.PodQOSBurstable, v1.PodQOSGuaranteed}[r.IntN(3)]
	pod := &v1.Pod{}
	pod.Name = fmt.Sprintf("pod-%d", g.seq)
	pod.Namespace = "default"
	pod.UID = types.UID(fmt.Sprintf("uid-%d", g.seq))
	pod.Generation = int64(1 + r.IntN(3))
	pod.Spec.Priority = g.priority()
	containers := 1 + r.IntN(3)
	for c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", c), Resources: g.resources(class)})
	}
	if g.exotic {
		switch r.IntN(6) {
		case 0:
			pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: g.resources(class)}}
		case 1:
			always := v1.ContainerRestartPolicyAlways
			pod.Spec.InitContainers = []v1.Container{
				{Name: "sidecar", RestartPolicy: &always, Resources: g.resources(class)},
				{Name: "init", Resources: g.resources(class)},
			}
		case 2:
			pod.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("32Mi")}
		case 3:
			if class != v1.PodQOSBestEffort {
				rr := g.resources(class)
				pod.Spec.Resources = &rr
			}
		}
		switch r.IntN(12) {
		case 0:
			pod.Annotations = map[string]string{sourceKey: sourceFile}
		case 1:
			pod.Annotations = map[string]string{mirrorKey: "hash", sourceKey: kubetypes.ApiserverSource}
		case 2:
			pod.Annotations = map[string]string{sourceKey: kubetypes.ApiserverSource}
		}
	}
	if r.IntN(2) == 0 {
		// Pods from the API server carry their class in status.
		pod.Status.QOSClass = qos.ComputePodQOS(pod)
	}
	return pod
}

func (g *nodeGen) pods(n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		pods[i] = g.pod()
	}
	if g.tieHeavy && n > 1 {
		// Exact copies, apart from identity, are the hardest ties.
		for k := 0; k < n/4; k++ {
			src, dst := g.r.IntN(n), g.r.IntN(n)
			cp := pods[src].DeepCopy()
			cp.Name, cp.UID = pods[dst].Name, pods[dst].UID
			pods[dst] = cp
		}
	}
	return pods
}

// criticalPod returns a pod critical in one of the ways the kubelet knows.
func (g *nodeGen) criticalPod() *v1.Pod {
	g.seq++
	pod := &v1.Pod{}
	pod.Name = fmt.Sprintf("critical-%d", g.seq)
	pod.Namespace = "kube-system"
	pod.UID = types.UID(fmt.Sprintf("uid-critical-%d", g.seq))
	switch g.r.IntN(5) {
	case 0:
		pod.Annotations = map[string]string{sourceKey: sourceFile}
	case 1:
		pod.Annotations = map[string]string{mirrorKey: "hash"}
	case 2:
		p := clusterCrit
		pod.Spec.Priority = &p
	case 3:
		p := nodeCrit
		pod.Spec.Priority = &p
	default:
		p := clusterCrit + int32(g.r.IntN(2000))
		pod.Spec.Priority = &p
	}
	return pod
}

// reasons returns admission failures for a shortfall of roughly frac of what
// the pods request, per resource.
func (g *nodeGen) reasons(pods []*v1.Pod, frac float64) []lifecycle.PredicateFailureReason {
	r := g.r
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}
	if g.exotic {
		names = append(names, v1.ResourceEphemeralStorage, gpu, v1.ResourcePods)
	}
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	names = names[:1+r.IntN(len(names))]
	var out []lifecycle.PredicateFailureReason
	for _, name := range names {
		var total int64
		for _, p := range pods {
			total += requestOf(p, name)
		}
		need := int64(float64(total)*frac) + 1
		if r.IntN(15) == 0 {
			need = total + 1 + int64(r.IntN(100)) // cannot be met
		}
		if name == v1.ResourcePods {
			need = int64(1 + r.IntN(3))
		}
		capacity := int64(1 << 40)
		out = append(out, &lifecycle.InsufficientResourceError{ResourceName: name, Requested: need, Used: capacity, Capacity: capacity})
	}
	if r.IntN(25) == 0 {
		out = append(out, &lifecycle.PredicateFailureError{PredicateName: "NodeAffinity", PredicateDesc: "node(s) didn't match Pod's node affinity/selector"})
	}
	return out
}

// requestOf is the stock accounting, used here only to size shortfalls.
func requestOf(pod *v1.Pod, name v1.ResourceName) int64 {
	return v1resource.GetResourceRequest(pod, name)
}
