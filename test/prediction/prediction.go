// Package prediction tells, with upstream's own kubelet code, which pods
// the stock kubelet preempts for a critical pod: the node e2e suites
// compare both kubelets' victims with it.
package prediction

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	resourcehelper "k8s.io/component-helpers/resource"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// StockVictims runs upstream's handler on pods for crit, with the failure
// reasons upstream's admission check gives on node, and returns the pods
// it would preempt and the reasons.
func StockVictims(node *v1.Node, pods []*v1.Pod, crit *v1.Pod) ([]string, string, error) {
	info := framework.NewNodeInfo(pods...)
	info.SetNode(node)
	var reasons []lifecycle.PredicateFailureReason
	var described []string
	for _, r := range scheduler.AdmissionCheck(crit, info, true) {
		if r.InsufficientResource == nil {
			return nil, "", fmt.Errorf("the critical pod fails %s (%s), not only for resources", r.Name, r.Reason)
		}
		ir := r.InsufficientResource
		reasons = append(reasons, &lifecycle.InsufficientResourceError{ResourceName: ir.ResourceName, Requested: ir.Requested, Used: ir.Used, Capacity: ir.Capacity})
		described = append(described, fmt.Sprintf("%s short by %d", ir.ResourceName, ir.Requested-(ir.Capacity-ir.Used)))
	}
	var victims []string
	kill := func(p *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		victims = append(victims, p.Name)
		return nil
	}
	h := stock.NewCriticalPodAdmissionHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(len(pods)+1))
	rest, err := h.HandleAdmissionFailure(context.Background(), crit, reasons, lifecycle.AddOperation)
	if err != nil || len(rest) > 0 {
		return nil, "", fmt.Errorf("upstream's handler refused the critical pod: %v %v", rest, err)
	}
	return victims, strings.Join(described, ", "), nil
}

// upstreamKey is what upstream's handler reads of a pod when crit needs
// room: whether crit may preempt it (priority counts only there), its QoS
// class and its requests. Pods with equal keys may stand in for each other.
// AlikeKeys returns the upstreamKey of each pod of names among pods,
// sorted, so that two victim lists compare equal when their pods are alike;
// a name not among pods stands as itself.
func AlikeKeys(crit *v1.Pod, pods []*v1.Pod, names []string) []string {
	var out []string
	for _, n := range names {
		i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return p.Name == n })
		if i < 0 {
			out = append(out, "not a candidate: "+n)
			continue
		}
		out = append(out, upstreamKey(crit, pods[i]))
	}
	slices.Sort(out)
	return out
}

func upstreamKey(crit, p *v1.Pod) string {
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	return fmt.Sprintf("%s cpu %dm memory %dMi preemptable %t", v1qos.GetPodQOS(p), req.Cpu().MilliValue(), req.Memory().Value()>>20, kubetypes.Preemptable(crit, p))
}

// Active returns the pods the kubelet counts on its node, of a list of the
// node's pods: those not terminal.
func Active(pods []v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for i := range pods {
		if p := &pods[i]; p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// Preempted names, sorted, the pods that carry the kubelet's preemption
// condition: DisruptionTarget, reason TerminationByKubelet.
func Preempted(pods []v1.Pod) []string {
	var out []string
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonTerminationByKubelet {
				out = append(out, p.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}
