//go:build e2enode

package e2enode

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// fullNodeSeed draws scenario 19's pods; 0 draws a seed per suite run,
// shared by every kubelet of the run and printed in the report.
var fullNodeSeed = flag.Uint64("full-node-seed", 0, "seed of scenario 19's pods (0: a new one each run)")

// defaultMaxPods is the kubelet's default maxPods.
const defaultMaxPods = 110

// A node at the kubelet's default 110 pods, drawn from a seed: BestEffort,
// Burstable and Guaranteed pods of a few sizes, with no priority, two user
// priorities, or system-cluster-critical (which a system-node-critical pod
// may preempt, being of higher priority). A critical pod then needs a pod
// slot and more cpu (and on odd seeds memory) than is free. The victims
// must be those upstream's own handler picks, run inside the test on the
// same pods with the failure reasons the kubelet's admission computes
// (upstream's scheduler code, as the kubelet's). The kubelet's pod list
// has no stable order, so where pods are alike in everything upstream
// reads (whether the critical pod may preempt them, QoS class, requests)
// either may be taken: the victims are compared by those.
func TestFullNode(t *testing.T) {
	seed := fullNodeSeedOnce()
	opts := scenarioOptions{maxPods: defaultMaxPods, timeout: 15 * time.Minute}
	runScenario(t, "19 node at 110 pods", opts, func(e *env) {
		for _, c := range fullNodeClasses {
			if c.name != "" && !strings.HasPrefix(c.name, "system-") {
				e.ensurePriorityClass(c.name, c.value)
			}
		}
		specs, crit := drawFullNode(seed, e.allocatable())
		start := time.Now()
		pods := e.createAllRunning(specs)
		e.note("seed %d: %d pods Running in %s", seed, len(pods), time.Since(start).Round(time.Second))

		node, err := e.c.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
		if err != nil {
			e.t.Fatalf("getting the node: %v", err)
		}
		critPod := crit.pod(e.node)
		critPod.Spec.Priority = ptr.To(int32(2_000_001_000)) // as the Priority admission sets it
		want, reasons, err := stockVictims(node, pods, critPod)
		if err != nil {
			e.t.Fatalf("upstream's handler on the node's pods: %v", err)
		}
		e.note("upstream's prediction for %s: %d victims", reasons, len(want))

		e.createCritical(crit)
		got := e.waitVictimCount(len(want))
		e.row.victims = got
		byName := map[string]*v1.Pod{}
		for _, p := range pods {
			byName[p.Name] = p
		}
		keys := func(names []string) []string {
			var out []string
			for _, n := range names {
				if p, ok := byName[n]; ok {
					out = append(out, upstreamKey(critPod, p))
				} else {
					out = append(out, "not a filler: "+n)
				}
			}
			slices.Sort(out)
			return out
		}
		e.note("victims alike to upstream's: %s", strings.Join(keys(got), "; "))
		if g, w := keys(got), keys(want); !slices.Equal(g, w) {
			e.t.Errorf("the kubelet preempted %d pods %v\n  alike: %v\nupstream's handler picks %d %v\n  alike: %v", len(got), got, g, len(want), want, w)
		}
		for _, n := range got {
			if p, ok := byName[n]; ok {
				e.expectPreempted(p, exitsOnTerm)
			}
		}
		running := 0
		for _, p := range pods {
			if !slices.Contains(got, p.Name) {
				cur, err := e.get(p)
				if err != nil || cur.Status.Phase != v1.PodRunning {
					e.t.Errorf("pod %s is not Running: %v %v", p.Name, err, cur.Status.Phase)
				}
				running++
			}
		}
		if running+len(got) != len(pods) {
			e.t.Errorf("%d running and %d preempted of %d pods", running, len(got), len(pods))
		}
	})
}

var (
	fullNodeSeedValue uint64
	fullNodeSeedInit  sync.Once
)

func fullNodeSeedOnce() uint64 {
	fullNodeSeedInit.Do(func() {
		fullNodeSeedValue = *fullNodeSeed
		if fullNodeSeedValue == 0 {
			fullNodeSeedValue = uint64(time.Now().UnixNano()%1_000_000) + 1
		}
	})
	return fullNodeSeedValue
}

// fullNodeClasses are the priorities the full node's pods draw from.
var fullNodeClasses = []struct {
	name  string
	value int32
}{{"", 0}, {"e2e-low", 100}, {"e2e-mid", 1000}, {"system-cluster-critical", 2_000_000_000}}

// drawFullNode returns the seed's 110 pods and the critical pod. Sizes are
// few, so that many pods are alike; together the pods hold at most 60% of
// the node's cpu and a tenth of its memory.
func drawFullNode(seed uint64, alloc v1.ResourceList) ([]podSpec, podSpec) {
	rng := rand.New(rand.NewPCG(seed, 0x66756c6c))
	cpuAlloc, memAlloc := alloc.Cpu().MilliValue(), alloc.Memory().Value()>>20
	unit := max(cpuAlloc*60/100/defaultMaxPods/4, 1) // millicores; the largest request is 4 units
	var specs []podSpec
	var usedCPU, usedMem int64
	for i := range defaultMaxPods {
		name := fmt.Sprintf("pod-%03d", i)
		class := fullNodeClasses[rng.IntN(len(fullNodeClasses))]
		cpu := unit * []int64{1, 2, 4}[rng.IntN(3)]
		mem := []int64{16, 32}[rng.IntN(2)]
		req := resources(fmt.Sprintf("%dm", cpu), fmt.Sprintf("%dMi", mem))
		var s podSpec
		switch q := rng.IntN(10); {
		case q < 2:
			s, cpu, mem = bestEffort(name), 0, 0
		case q < 7:
			s = podSpec{name: name, requests: req}
		default:
			s = podSpec{name: name, requests: req, limits: req}
		}
		s.priorityClass = class.name
		if strings.HasPrefix(class.name, "system-") {
			s.namespace = metav1.NamespaceSystem
		}
		s.gracePeriod = ptr.To(int64(1))
		usedCPU += cpu
		usedMem += mem
		specs = append(specs, s)
	}
	// A pod slot, and between one and twelve units of cpu more than is free.
	cpuReq := cpuAlloc - usedCPU + unit*(1+rng.Int64N(12))
	memReq := int64(16)
	if seed%2 == 1 {
		memReq = memAlloc - usedMem + 16*(1+rng.Int64N(8))
	}
	return specs, critical("critical", resources(fmt.Sprintf("%dm", cpuReq), fmt.Sprintf("%dMi", memReq)))
}

// createAllRunning creates many pods, a few requests at a time, and waits
// until all run.
func (e *env) createAllRunning(specs []podSpec) []*v1.Pod {
	e.t.Helper()
	var pods []*v1.Pod
	for batch := range slices.Chunk(specs, 10) {
		pods = append(pods, e.createTogether(batch)...)
	}
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.node})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			switch p.Status.Phase {
			case v1.PodRunning:
				running++
			case v1.PodFailed, v1.PodSucceeded:
				return false, fmt.Errorf("pod %s/%s ended %s: %s %s", p.Namespace, p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
		}
		return running == len(specs), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %d pods to run: %v", len(specs), err)
	}
	for i, p := range pods {
		cur, err := e.get(p)
		if err != nil {
			e.t.Fatalf("getting %s: %v", p.Name, err)
		}
		pods[i] = cur
	}
	return pods
}

// stockVictims runs upstream's handler on pods for crit, with the failure
// reasons upstream's admission check gives on node, and returns the pods
// it would preempt and the reasons.
func stockVictims(node *v1.Node, pods []*v1.Pod, crit *v1.Pod) ([]string, string, error) {
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
func upstreamKey(crit, p *v1.Pod) string {
	var cpu, mem int64
	for _, c := range p.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	return fmt.Sprintf("%s cpu %dm memory %dMi preemptable %t", v1qos.GetPodQOS(p), cpu, mem>>20, kubetypes.Preemptable(crit, p))
}
