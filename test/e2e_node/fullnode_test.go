//go:build e2enode

package e2enode

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	"github.com/critlet/critlet/test/prediction"
)

// fullNodeSeeds draw scenario 19: the first seed draws the node and its
// first two critical pods, on every kubelet, so that every run checks one
// known node on both; each further seed draws two more critical pods on
// the same node, on every kubelet too ("random" one drawn anew per suite
// run, printed in the report). A failure names its seeds: -full-node-seeds=1901,N repeats a
// drawn pair, -full-node-seeds=N draws the node from N on both kubelets.
var fullNodeSeeds = flag.String("full-node-seeds", "1901,random", "seeds of scenario 19, comma-separated: the first draws the node, each further one two more critical pods on the same node; random draws one per run")

// defaultMaxPods is the kubelet's default maxPods.
const defaultMaxPods = 110

// A node at the kubelet's default 110 pods, drawn from a seed: BestEffort,
// Burstable and Guaranteed pods of a few sizes, with no priority, two user
// priorities, or system-cluster-critical (which a system-node-critical pod
// may preempt, being of higher priority). A first critical pod then needs a
// pod slot and more cpu than is free; once it runs, a second one needs more
// cpu and more memory than are then free (and a slot if the first took only
// one pod). Each further seed draws two more such pairs on the same node,
// on every kubelet, the node filled once (each fill of 110 pods costs minutes). Each time the
// victims must be those upstream's own handler picks, run inside the test
// on the node's pods with the failure reasons the kubelet's admission
// computes (upstream's scheduler code, as the kubelet's). The kubelet's pod
// list has no stable order, so where pods are alike in everything upstream
// reads (whether the critical pod may preempt them, QoS class, requests)
// either may be taken: the victims are compared by those.
func TestFullNode(t *testing.T) {
	seeds, err := parseSeeds(*fullNodeSeeds, uint64(time.Now().UnixNano()%1_000_000)+1)
	if err != nil {
		t.Fatal(err)
	}
	more := ""
	if len(seeds) > 1 {
		more = fmt.Sprintf(", critical pods of seeds %v too", seeds[1:])
	}
	opts := scenarioOptions{maxPods: defaultMaxPods, timeout: 15 * time.Minute}
	runScenario(t, fmt.Sprintf("19 node at 110 pods, seed %d%s", seeds[0], more), opts, func(e *env) {
		for _, c := range fullNodeClasses {
			if c.name != "" && !strings.HasPrefix(c.name, "system-") {
				e.ensurePriorityClass(c.name, c.value)
			}
		}
		rng := rand.New(rand.NewPCG(seeds[0], 0x66756c6c))
		alloc := e.allocatable()
		specs, unit := drawFullNode(rng, alloc)
		start := time.Now()
		// Ten at a time: 110 sandboxes asked for at once can outlast the
		// runtime's request deadline on a busy two-core machine, and a
		// pod whose start failed that way ends Failed (restartPolicy
		// Never), not preempted.
		var pods []*v1.Pod
		for batch := range slices.Chunk(specs, 10) {
			pods = append(pods, e.createRunning(batch...)...)
		}
		// A pod is Running once its container started, a moment before
		// the pause process in it handles SIGTERM; a victim signalled in
		// that moment dies by the signal (Failed) instead of exiting 0.
		e.settle(2 * time.Second)
		e.note("seed %d: %d pods Running in %s", seeds[0], len(pods), time.Since(start).Round(time.Second))

		for i, seed := range seeds {
			suffix := ""
			if i > 0 {
				// A seed's own stream, so that -full-node-seeds=1901,N draws
				// the same pods for N whatever came before.
				rng = rand.New(rand.NewPCG(seed, 0x66756c6c))
				suffix = fmt.Sprintf("-%d", seed)
			}
			cpu := e.admitOnFullNode(pods, e.row.victims, shortOf(rng, "critical-cpu"+suffix, alloc, e.activePods(), unit, false), false)
			e.row.victims = append(e.row.victims, cpu...)
			mem := e.admitOnFullNode(pods, e.row.victims, shortOf(rng, "critical-memory"+suffix, alloc, e.activePods(), unit, true), true)
			e.row.victims = append(e.row.victims, mem...)
		}
		for _, p := range pods {
			if !slices.Contains(e.row.victims, p.Name) {
				e.expectPhase(p, v1.PodRunning)
			}
		}
	})
}

// parseSeeds reads -full-node-seeds; random stands for drawn.
func parseSeeds(list string, drawn uint64) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "random" {
			out = append(out, drawn)
			continue
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("-full-node-seeds: %q is neither a seed above 0 nor random", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// admitOnFullNode predicts with upstream's handler which of the node's
// active pods crit's admission preempts, creates crit, and checks that the
// kubelet preempted pods alike to those (fillers only: earlier victims, in
// before, are not counted again). crit was drawn short of cpu, and of
// memory too where memory is set. It returns the new victims.
func (e *env) admitOnFullNode(fillers []*v1.Pod, before []string, crit podSpec, memory bool) []string {
	e.t.Helper()
	node, err := e.c.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting the node: %v", err)
	}
	critPod := crit.pod(e.node)
	critPod.Spec.Priority = ptr.To(int32(2_000_001_000)) // as the Priority admission sets it
	want, reasons, err := prediction.StockVictims(node, e.activePods(), critPod)
	if err != nil {
		e.t.Fatalf("%s: upstream's handler on the node's pods: %v", crit.name, err)
	}
	e.note("%s: upstream's prediction for %s: %d victims", crit.name, reasons, len(want))
	if !strings.Contains(reasons, "cpu") || strings.Contains(reasons, "memory") != memory {
		e.t.Fatalf("%s: drawn short of %s, want cpu%s", crit.name, reasons, map[bool]string{true: " and memory", false: " only"}[memory])
	}

	e.createCritical(crit)
	var got []string
	for _, n := range e.waitVictims("", len(before)+len(want), time.Second) {
		if !slices.Contains(before, n) {
			got = append(got, n)
		}
	}
	byName := map[string]*v1.Pod{}
	for _, p := range fillers {
		byName[p.Name] = p
	}
	keys := func(names []string) []string { return prediction.AlikeKeys(critPod, fillers, names) }
	e.note("%s: victims alike to upstream's: %s", crit.name, strings.Join(keys(got), "; "))
	if g, w := keys(got), keys(want); !slices.Equal(g, w) {
		e.t.Errorf("%s: the kubelet preempted %d pods %v\n  alike: %v\nupstream's handler picks %d %v\n  alike: %v", crit.name, len(got), got, g, len(want), want, w)
	}
	for _, n := range got {
		if p, ok := byName[n]; ok {
			e.expectPreempted(p, exitsOnTerm)
		}
	}
	return got
}

// activePods lists the node's pods the kubelet counts: bound to it and not
// terminal.
func (e *env) activePods() []*v1.Pod {
	e.t.Helper()
	list, err := e.c.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.node})
	if err != nil {
		e.t.Fatalf("listing the node's pods: %v", err)
	}
	return prediction.Active(list.Items)
}

// fullNodeClasses are the priorities the full node's pods draw from.
var fullNodeClasses = []struct {
	name  string
	value int32
}{{"", 0}, {"e2e-low", 100}, {"e2e-mid", 1000}, {"system-cluster-critical", 2_000_000_000}}

// drawFullNode returns 110 pods drawn from rng, and the cpu unit their
// sizes are made of. Sizes are few, so that many pods are alike; together
// the pods hold at most 60% of the node's cpu and a tenth of its memory.
func drawFullNode(rng *rand.Rand, alloc v1.ResourceList) ([]podSpec, int64) {
	cpuAlloc := alloc.Cpu().MilliValue()
	unit := max(cpuAlloc*60/100/defaultMaxPods/4, 1) // millicores; the largest request is 4 units
	var specs []podSpec
	for i := range defaultMaxPods {
		name := fmt.Sprintf("pod-%03d", i)
		class := fullNodeClasses[rng.IntN(len(fullNodeClasses))]
		cpu := unit * []int64{1, 2, 4}[rng.IntN(3)]
		mem := []int64{16, 32}[rng.IntN(2)]
		req := resources(fmt.Sprintf("%dm", cpu), fmt.Sprintf("%dMi", mem))
		var s podSpec
		switch q := rng.IntN(10); {
		case q < 2:
			s = bestEffort(name)
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
		specs = append(specs, s)
	}
	return specs, unit
}

// shortOf returns a critical pod named name needing between one and twelve
// units of cpu more than pods leave free, and with memory between 16 and
// 128Mi more than they leave free (else 16Mi, which fits).
func shortOf(rng *rand.Rand, name string, alloc v1.ResourceList, pods []*v1.Pod, unit int64, memory bool) podSpec {
	var usedCPU, usedMem int64
	for _, p := range pods {
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		usedCPU += req.Cpu().MilliValue()
		usedMem += req.Memory().Value()
	}
	cpuReq := alloc.Cpu().MilliValue() - usedCPU + unit*(1+rng.Int64N(12))
	memReq := int64(16 << 20)
	if memory {
		memReq = alloc.Memory().Value() - usedMem + (16<<20)*(1+rng.Int64N(8))
	}
	return critical(name, v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(cpuReq, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memReq, resource.BinarySI),
	})
}
