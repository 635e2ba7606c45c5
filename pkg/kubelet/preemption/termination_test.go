package preemption

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/kubelet/preemption/options"
	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
)

// uniformNode is n Burstable pods of 100m and 100Mi each.
func uniformNode(n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		pods[i] = castPod(fmt.Sprintf("pod-%02d", i), "100m", "100Mi", false, nil)
	}
	return pods
}

func allPods(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("pod-%02d", i))
	}
	return names
}

func memoryShortfall(mib int64) []lifecycle.PredicateFailureReason {
	return []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, mib*mi)}
}

func TestTerminationRunsVictimsConcurrently(t *testing.T) {
	for _, parallelism := range []int{2, 3, 8} {
		t.Run(fmt.Sprint(parallelism), func(t *testing.T) {
			pods := uniformNode(6)
			want := min(parallelism, 6)
			var running, peak atomic.Int32
			arrived := make(chan struct{}, 6)
			release := make(chan struct{})
			var once sync.Once
			kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
				now := running.Add(1)
				defer running.Add(-1)
				for {
					p := peak.Load()
					if now <= p || peak.CompareAndSwap(p, now) {
						break
					}
				}
				arrived <- struct{}{}
				<-release
				return nil
			}
			opts := options.Defaults()
			opts.Parallelism = parallelism
			h := newHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(20), opts)
			done := make(chan error)
			_, ctx := ktesting.NewTestContext(t)
			go func() {
				_, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(600), lifecycle.AddOperation)
				done <- err
			}()
			// Sequential kills would never get `want` of them in flight at once.
			for k := 0; k < want; k++ {
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatalf("only %d kills started while none could finish; want %d at once", k, want)
				}
			}
			once.Do(func() { close(release) })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := peak.Load(); int(got) != want {
				t.Fatalf("peak concurrency %d, want %d", got, want)
			}
		})
	}
}

func TestParallelismOneKillsInPlanOrder(t *testing.T) {
	pods := []*v1.Pod{bestEffortPod, smallBurstable, largeBurstable, smallGuaranteed, largeGuaranteed}
	var order []string
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		order = append(order, pod.Name)
		return nil
	}
	h := newHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(20), options.Upstream())
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(550), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	if want := "large-burstable,large-guaranteed"; strings.Join(order, ",") != want {
		t.Fatalf("killed %v, want %s", order, want)
	}
}

// killScript decides per pod how its kill ends.
type killScript struct {
	mu     sync.Mutex
	fail   map[string]bool
	hang   map[string]bool
	killed []string
	stuck  chan struct{}
}

func (s *killScript) kill(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
	s.mu.Lock()
	s.killed = append(s.killed, pod.Name)
	fail, hang := s.fail[pod.Name], s.hang[pod.Name]
	s.mu.Unlock()
	if hang {
		<-s.stuck
	}
	if fail {
		return errors.New("container runtime failed to stop the pod")
	}
	return nil
}

func TestReplanning(t *testing.T) {
	tests := []struct {
		name       string
		replans    int
		fail, hang []string
		shortfall  int64 // MiB, of 100Mi pods
		wantKilled int
		wantEvent  string
	}{
		{name: "no failures, no further victims", replans: 2, shortfall: 250, wantKilled: 3, wantEvent: "Normal " + reasonPreempted},
		{name: "a failed victim is replaced", replans: 2, fail: []string{"pod-09"}, shortfall: 250, wantKilled: 4, wantEvent: "Warning " + reasonPreemptionReplanned},
		{name: "without re-planning the pod is admitted short", replans: 0, fail: []string{"pod-09"}, shortfall: 250, wantKilled: 3, wantEvent: "Warning " + reasonPreemptionIncomplete},
		{name: "rounds are bounded", replans: 2, fail: allPods(10), shortfall: 250, wantKilled: 9, wantEvent: "Warning " + reasonPreemptionIncomplete},
		{name: "replacements may fail too", replans: 2, fail: []string{"pod-09", "pod-08", "pod-07", "pod-06", "pod-05"}, shortfall: 250, wantKilled: 8, wantEvent: "Warning " + reasonPreemptionReplanned},
		{name: "a hung victim times out and is replaced", replans: 1, hang: []string{"pod-09"}, shortfall: 150, wantKilled: 3, wantEvent: "Warning " + reasonPreemptionReplanned},
		{name: "no candidates left to replace a victim", replans: 3, fail: []string{"pod-01"}, shortfall: 200, wantKilled: 2, wantEvent: "Warning " + reasonPreemptionIncomplete},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 10
			if strings.HasPrefix(tc.name, "no candidates") {
				n = 2
			}
			pods := uniformNode(n)
			script := &killScript{fail: map[string]bool{}, hang: map[string]bool{}, stuck: make(chan struct{})}
			defer close(script.stuck)
			for _, p := range tc.fail {
				script.fail[p] = true
			}
			for _, p := range tc.hang {
				script.hang[p] = true
			}
			opts := options.Options{Policy: victims.PolicyUpstream, Parallelism: 4, MaxReplans: tc.replans, KillTimeout: 50 * time.Millisecond}
			rec := record.NewFakeRecorder(50)
			h := newHandler(func() []*v1.Pod { return pods }, script.kill, rec, opts)
			_, ctx := ktesting.NewTestContext(t)
			reasons, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(tc.shortfall), lifecycle.AddOperation)
			if err != nil || len(reasons) != 0 {
				t.Fatalf("not admitted: %v %v", reasons, err)
			}
			script.mu.Lock()
			killed := append([]string(nil), script.killed...)
			script.mu.Unlock()
			seen := map[string]bool{}
			for _, p := range killed {
				if seen[p] {
					t.Fatalf("%s killed twice: %v", p, killed)
				}
				seen[p] = true
			}
			if len(killed) != tc.wantKilled {
				t.Fatalf("killed %v, want %d pods", killed, tc.wantKilled)
			}
			close(rec.Events)
			var preemptorEvents []string
			for e := range rec.Events {
				if !strings.HasPrefix(e, "Warning Preempting ") {
					preemptorEvents = append(preemptorEvents, e)
				}
			}
			if len(preemptorEvents) != 1 || !strings.HasPrefix(preemptorEvents[0], tc.wantEvent+" ") {
				t.Fatalf("events on the critical pod %q, want one %q", preemptorEvents, tc.wantEvent)
			}
		})
	}
}

// TestReplanningModel checks, on random nodes with random failing kills,
// that critlet's rounds are exactly those of the rule it states: round r+1
// runs only while the victims that did terminate leave a shortfall, chooses
// only among pods not tried yet, and covers only that shortfall (what the
// policy picks for it); at most MaxReplans further rounds; no pod twice.
func TestReplanningModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	cases := 3000
	if testing.Short() {
		cases = 300
	}
	replanned := 0
	for c := range cases {
		g := &nodeGen{r: r, tieHeavy: c%2 == 0, exotic: c%3 == 0}
		pods := g.pods(5 + r.IntN(40))
		admit := g.criticalPod()
		reasons := g.reasons(pods, r.Float64()*0.5)
		opts := options.Options{Policy: victims.Policies[r.IntN(2)], Parallelism: 1, MaxReplans: r.IntN(4)}
		fail := map[string]bool{}
		for _, p := range pods {
			if r.IntN(4) == 0 {
				fail[p.Name] = true
			}
		}
		var killed []string
		kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
			killed = append(killed, pod.Name)
			if fail[pod.Name] {
				return errors.New("stop failed")
			}
			return nil
		}
		h := newHandler(func() []*v1.Pod { return pods }, kill, &record.FakeRecorder{}, opts)
		_, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logr.Discard()), admit, reasons, lifecycle.AddOperation)

		// The model, from the public pieces.
		var reqs []victims.Requirement
		for _, rs := range reasons {
			ir, ok := rs.(*lifecycle.InsufficientResourceError)
			if !ok {
				reqs = nil
				break
			}
			reqs = append(reqs, victims.Requirement{Resource: string(ir.ResourceName), Quantity: ir.GetInsufficientAmount()})
		}
		if reqs == nil || !isCritical(admit) {
			if len(killed) > 0 {
				t.Fatalf("case %d: killed %v without a resource-only failure of a critical pod", c, killed)
			}
			continue
		}
		cpods, cands, cerr := candidates(admit, pods, reqs)
		if cerr != nil {
			t.Fatal(cerr)
		}
		var want []string
		var freed []int
		tried := make([]bool, len(cands))
		idx := make([]int, len(cands))
		for i := range idx {
			idx[i] = i
		}
		need := reqs
		sub := cands
		for round := 0; ; round++ {
			plan, serr := victims.Select(opts.Policy, need, sub)
			if serr != nil {
				if round == 0 && err == nil {
					t.Fatalf("case %d: admitted though nothing covers the need: %v", c, serr)
				}
				break
			}
			for _, k := range plan {
				i := idx[k]
				tried[i] = true
				want = append(want, cpods[i].Name)
				if !fail[cpods[i].Name] {
					freed = append(freed, i)
				}
			}
			need = victims.Remaining(reqs, cands, freed)
			if victims.Met(need) || round == opts.MaxReplans {
				break
			}
			if round == 0 {
				replanned++
			}
			idx, sub = untriedCandidates(cands, tried)
		}
		if strings.Join(killed, ",") != strings.Join(want, ",") {
			t.Fatalf("case %d (%+v): killed %v, model %v", c, opts, killed, want)
		}
	}
	if replanned < cases/20 {
		t.Fatalf("only %d of %d cases re-planned: generator too narrow", replanned, cases)
	}
}

func isCritical(p *v1.Pod) bool {
	return p.Spec.Priority != nil && *p.Spec.Priority >= clusterCrit || p.Annotations[sourceKey] == sourceFile || p.Annotations[mirrorKey] != ""
}

func TestMetricsAndStockCounter(t *testing.T) {
	registerMetrics()
	pods := uniformNode(6)
	script := &killScript{fail: map[string]bool{"pod-05": true}, hang: map[string]bool{}, stuck: make(chan struct{})}
	opts := options.Options{Policy: victims.PolicyPriority, Parallelism: 2, MaxReplans: 1}
	h := newHandler(func() []*v1.Pod { return pods }, script.kill, &record.FakeRecorder{}, opts)
	_, ctx := ktesting.NewTestContext(t)
	before := metricCounts(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(150), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	after := metricCounts(t)
	if d := after.failures - before.failures; d != 1 {
		t.Errorf("kill failures +%v, want +1", d)
	}
	if d := after.replans - before.replans; d != 1 {
		t.Errorf("replans +%v, want +1", d)
	}
	if d := after.admissions - before.admissions; d != 1 {
		t.Errorf("admission duration observations +%v, want +1", d)
	}
	if d := after.selections - before.selections; d != 1 {
		t.Errorf("selection duration observations +%v, want +1 (one per admission)", d)
	}
	if d := after.victimSum - before.victimSum; d != 3 {
		t.Errorf("victims observed +%v, want +3 (two planned, one replacement)", d)
	}
}

type counts struct{ failures, replans, admissions, selections, victimSum float64 }

func metricCounts(t *testing.T) counts {
	t.Helper()
	var c counts
	var err error
	must := func(v float64, e error) float64 {
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	c.failures = must(testutil.GetCounterMetricValue(killFailures.WithLabelValues("priority", "error")))
	c.replans = must(testutil.GetCounterMetricValue(replans.WithLabelValues("priority")))
	ac, e := testutil.GetHistogramMetricCount(admissionDuration.WithLabelValues("priority"))
	c.admissions = float64(must(float64(ac), e))
	sc, e := testutil.GetHistogramMetricCount(selectionDuration.WithLabelValues("priority"))
	c.selections = must(float64(sc), e)
	vs, e := testutil.GetHistogramMetricValue(victimsPerAdmission.WithLabelValues("priority"))
	c.victimSum = must(vs, e)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// BenchmarkTermination shows admission latency with victims that take a
// while to stop: about their sum one at a time, about the slowest at once.
func BenchmarkTermination(b *testing.B) {
	const stop = 20 * time.Millisecond
	for _, parallelism := range []int{1, 8} {
		b.Run(fmt.Sprintf("victims=5/parallelism=%d", parallelism), func(b *testing.B) {
			pods := uniformNode(5)
			kill := func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error { time.Sleep(stop); return nil }
			opts := options.Defaults()
			opts.Parallelism = parallelism
			h := newHandler(func() []*v1.Pod { return pods }, kill, &record.FakeRecorder{}, opts)
			ctx := klog.NewContext(context.Background(), logr.Discard())
			for b.Loop() {
				if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(500), lifecycle.AddOperation); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
