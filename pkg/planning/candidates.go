package planning

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/features"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/victims"
)

var qosClasses = map[v1.PodQOSClass]victims.QOSClass{
	v1.PodQOSBestEffort: victims.BestEffort,
	v1.PodQOSBurstable:  victims.Burstable,
	v1.PodQOSGuaranteed: victims.Guaranteed,
}

// Candidates returns the pods admitPod may preempt, in their given order,
// and the same pods as the selection engine sees them: each pod's requests
// are computed once here, where the stock kubelet recomputes them for every
// comparison. A pod requesting a negative amount is an error.
//
// Cost: O(pods × len(reqs)).
func Candidates(admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement) ([]*v1.Pod, []victims.Candidate, error) {
	return CandidatesHolding(admitPod, pods, reqs, nil)
}

// CandidatesHolding is Candidates with each pod credited, for the resources
// held counts, with what it holds rather than what it requests: a kill
// frees the devices a pod holds, not its request. A nil held is Candidates.
//
// Cost: O(pods × len(reqs)) calls of held at most.
func CandidatesHolding(admitPod *v1.Pod, pods []*v1.Pod, reqs []victims.Requirement, held HeldDevices) ([]*v1.Pod, []victims.Candidate, error) {
	podLevel := utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources)
	names := make([]v1.ResourceName, len(reqs))
	for j, r := range reqs {
		names[j] = v1.ResourceName(r.Resource)
	}
	var kept []*v1.Pod
	var cands []victims.Candidate
	requests := make([]int64, 0, len(pods)*len(reqs))
	// kubetypes.Preemptable, with the preemptor's side worked out once.
	critical := kubetypes.IsCriticalPod(admitPod)
	preemptable := func(pod *v1.Pod) bool {
		if critical && !kubetypes.IsCriticalPod(pod) {
			return true
		}
		return admitPod.Spec.Priority != nil && pod.Spec.Priority != nil && *admitPod.Spec.Priority > *pod.Spec.Priority
	}
	for _, pod := range pods {
		if !preemptable(pod) {
			continue
		}
		qos, ok := qosClasses[v1qos.GetPodQOS(pod)]
		if !ok {
			// The stock kubelet leaves pods of an unknown class alone.
			continue
		}
		r := podRequests(pod, podLevel)
		c := victims.Candidate{QOS: qos, Memory: r.value(v1.ResourceMemory), CPU: r.value(v1.ResourceCPU)}
		if c.Memory < 0 || c.CPU < 0 {
			return nil, nil, fmt.Errorf("pod %s requests a negative amount of memory or cpu", klog.KObj(pod))
		}
		if pod.Spec.Priority != nil {
			c.Priority = *pod.Spec.Priority
		}
		start := len(requests)
		for _, name := range names {
			var v int64
			switch name {
			case v1.ResourceMemory:
				v = c.Memory
			case v1.ResourceCPU:
				v = c.CPU
			default:
				v = r.value(name)
				if held != nil {
					if n, ok := held(pod, name); ok {
						v = n
					}
				}
			}
			if v < 0 {
				return nil, nil, fmt.Errorf("pod %s requests a negative amount of %s", klog.KObj(pod), name)
			}
			requests = append(requests, v)
		}
		c.Requests = requests[start:len(requests):len(requests)]
		kept = append(kept, pod)
		cands = append(cands, c)
	}
	return kept, cands, nil
}

// requests is one pod's total requests with the stock kubelet's accounting
// (k8s.io/kubernetes/pkg/api/v1/resource.GetResourceRequest), computed
// without the per-container maps that accounting builds on every call.
type requests struct {
	pod *v1.Pod
	// totals holds the component-helpers sum for pods with pod-level
	// resources, whose rules that package owns; nil for every other pod, whose
	// requests are summed straight from the containers.
	totals v1.ResourceList
}

func podRequests(pod *v1.Pod, podLevelGate bool) requests {
	if r := pod.Spec.Resources; r == nil || len(r.Requests)+len(r.Limits) == 0 {
		return requests{pod: pod}
	}
	// Pod-level resources, when set and enabled, replace the containers'.
	skip := podLevelGate && resourcehelper.IsPodLevelResourcesSet(pod)
	return requests{
		pod:    pod,
		totals: resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{SkipContainerLevelResources: skip, ExcludeOverhead: true}),
	}
}

// value returns the request for name: 1 for pods, millicores for cpu, the
// base unit rounded up otherwise. Overhead counts only where the pod
// requests some of the resource at all. A negative quantity anywhere makes
// the result negative, for the caller to refuse.
func (r requests) value(name v1.ResourceName) int64 {
	if name == v1.ResourcePods {
		return 1
	}
	var q resource.Quantity
	if r.totals != nil {
		if v, ok := r.totals[name]; ok {
			q.Add(v)
		}
	} else if !r.sum(name, &q) {
		return -1
	}
	if overhead, ok := r.pod.Spec.Overhead[name]; ok && !q.IsZero() {
		q.Add(overhead)
	}
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// sum adds up the pod's containers' requests for name as the sidecar rules
// have it: regular containers and sidecars run together, and each init
// container runs beside the sidecars started before it; the pod needs the
// larger of the two. Quantities are added exactly, rounding once at the end
// as the stock accounting does. It reports false on a negative quantity.
func (r requests) sum(name v1.ResourceName, total *resource.Quantity) bool {
	spec := &r.pod.Spec
	for i := range spec.Containers {
		if v, ok := spec.Containers[i].Resources.Requests[name]; ok {
			if v.Sign() < 0 {
				return false
			}
			total.Add(v)
		}
	}
	if len(spec.InitContainers) == 0 {
		return true
	}
	var sidecars, peak resource.Quantity
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		v := c.Resources.Requests[name]
		if v.Sign() < 0 {
			return false
		}
		// Quantities may share a decimal behind a copy, and Add writes
		// through it: copy deeply before adding.
		use := sidecars.DeepCopy()
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			total.Add(v)
			sidecars.Add(v)
			use = sidecars.DeepCopy()
		} else {
			use.Add(v)
		}
		if use.Cmp(peak) > 0 {
			peak = use
		}
	}
	if peak.Cmp(*total) > 0 {
		*total = peak.DeepCopy()
	}
	return true
}
