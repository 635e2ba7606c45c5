package preemption

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/settings"
	"github.com/critlet/critlet/pkg/victims"
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
			opts := settings.Defaults()
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
	h := newHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(20), settings.Upstream())
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
			opts := settings.Settings{Policy: victims.PolicyUpstream, Parallelism: 4, MaxReplans: tc.replans, KillTimeout: 50 * time.Millisecond}
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

// TestReplanningModel checks critlet's rounds, on random nodes with random
// failing kills, against oracles that share no code with it: the stock
// kubelet's own handler chooses each round's victims (for the priority
// policy, among the pods at or below the lowest priority whose pods can
// cover the shortfall, found by plain sums here), and the shortfall a round
// leaves is summed with the stock accounting. A further round must run
// exactly while a shortfall is left, rounds remain and the untried pods can
// cover it; no pod is killed twice.
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
		opts := settings.Settings{Policy: victims.Policies[r.IntN(2)], Parallelism: 1, MaxReplans: r.IntN(4)}
		fail := map[string]bool{}
		for _, p := range pods {
			if r.IntN(4) == 0 {
				fail[p.Name] = true
			}
		}
		// Kills and log lines in one sequence, so rounds can be told apart.
		trace := &logCapture{}
		kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
			trace.mu.Lock()
			trace.entries = append(trace.entries, "kill "+pod.Name)
			trace.mu.Unlock()
			if fail[pod.Name] {
				return errors.New("stop failed")
			}
			return nil
		}
		h := newHandler(func() []*v1.Pod { return pods }, kill, &record.FakeRecorder{}, opts)
		_, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), trace.logger()), admit, reasons, lifecycle.AddOperation)
		var rounds [][]string
		round := []string{}
		for _, l := range trace.lines() {
			switch {
			case strings.HasPrefix(l, "kill "):
				round = append(round, strings.TrimPrefix(l, "kill "))
			case strings.Contains(l, "Re-planning critical-pod preemption"):
				rounds, round = append(rounds, round), []string{}
			}
		}
		if len(round) > 0 {
			rounds = append(rounds, round)
		}

		need := map[v1.ResourceName]int64{}
		var order []v1.ResourceName
		for _, rs := range reasons {
			ir, ok := rs.(*lifecycle.InsufficientResourceError)
			if !ok {
				order = nil
				break
			}
			need[ir.ResourceName] = ir.GetInsufficientAmount()
			order = append(order, ir.ResourceName)
		}
		if order == nil || !isCritical(admit) {
			if len(rounds) > 0 {
				t.Fatalf("case %d: killed %v without a resource-only failure of a critical pod", c, rounds)
			}
			continue
		}
		untried := append([]*v1.Pod(nil), pods...)
		for k := 0; ; k++ {
			want, ok := oracleRound(t, opts.Policy, admit, untried, order, need)
			if k == 0 && !ok {
				if err == nil || len(rounds) > 0 {
					t.Fatalf("case %d: stock finds no victims, critlet killed %v (error %v)", c, rounds, err)
				}
				break
			}
			if !ok {
				if k < len(rounds) {
					t.Fatalf("case %d (%+v): round %d killed %v; the untried pods cannot cover %v", c, opts, k, rounds[k], need)
				}
				break
			}
			if k >= len(rounds) {
				t.Fatalf("case %d (%+v): rounds %v end before round %d, which should kill %v for %v", c, opts, rounds, k, want, need)
			}
			if strings.Join(rounds[k], ",") != strings.Join(want, ",") {
				t.Fatalf("case %d (%+v): round %d killed %v, stock oracle %v", c, opts, k, rounds[k], want)
			}
			for _, name := range want {
				untried = slices.DeleteFunc(untried, func(p *v1.Pod) bool { return p.Name == name })
				if fail[name] {
					continue
				}
				for _, res := range order {
					need[res] -= requestOf(byName(pods, name), res)
				}
			}
			open := false
			for _, res := range order {
				open = open || need[res] > 0
			}
			if !open || k == opts.MaxReplans {
				if len(rounds) != k+1 {
					t.Fatalf("case %d (%+v): %d rounds %v, want %d", c, opts, len(rounds), rounds, k+1)
				}
				break
			}
			if k == 0 {
				replanned++
			}
		}
	}
	if replanned < cases/20 {
		t.Fatalf("only %d of %d cases left a shortfall to re-plan: generator too narrow", replanned, cases)
	}
}

// oracleRound returns the victims the stock handler picks for need among
// pods; for the priority policy, only among the pods at or below the lowest
// priority whose pods (with all lower ones) can cover need. It reports false
// when nothing can cover need.
func oracleRound(t *testing.T, policy victims.Policy, admit *v1.Pod, pods []*v1.Pod, order []v1.ResourceName, need map[v1.ResourceName]int64) ([]string, bool) {
	var reasons []lifecycle.PredicateFailureReason
	for _, res := range order {
		if need[res] > 0 {
			reasons = append(reasons, &lifecycle.InsufficientResourceError{ResourceName: res, Requested: need[res]})
		}
	}
	if policy == victims.PolicyPriority {
		pods = atOrBelowCeiling(admit, pods, order, need)
	}
	var killed []string
	h := stock.NewCriticalPodAdmissionHandler(func() []*v1.Pod { return pods },
		func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
			killed = append(killed, pod.Name)
			return nil
		},
		&record.FakeRecorder{})
	if _, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logr.Discard()), admit, reasons, lifecycle.AddOperation); err != nil {
		return nil, false
	}
	return killed, true
}

// atOrBelowCeiling keeps the pods whose priority is at most the lowest one
// at which the preemptable pods of that priority or lower cover need; all
// pods when none does.
func atOrBelowCeiling(admit *v1.Pod, pods []*v1.Pod, order []v1.ResourceName, need map[v1.ResourceName]int64) []*v1.Pod {
	prio := func(p *v1.Pod) int32 {
		if p.Spec.Priority == nil {
			return 0
		}
		return *p.Spec.Priority
	}
	var levels []int32
	for _, p := range pods {
		if kubetypes.Preemptable(admit, p) {
			levels = append(levels, prio(p))
		}
	}
	slices.Sort(levels)
	for _, ceiling := range slices.Compact(levels) {
		covered := true
		for _, res := range order {
			var freed int64
			for _, p := range pods {
				if kubetypes.Preemptable(admit, p) && prio(p) <= ceiling {
					freed += requestOf(p, res)
				}
			}
			covered = covered && freed >= need[res]
		}
		if covered {
			return slices.DeleteFunc(append([]*v1.Pod(nil), pods...), func(p *v1.Pod) bool { return prio(p) > ceiling })
		}
	}
	return pods
}

func byName(pods []*v1.Pod, name string) *v1.Pod {
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func isCritical(p *v1.Pod) bool {
	return p.Spec.Priority != nil && *p.Spec.Priority >= clusterCrit || p.Annotations[sourceKey] == sourceFile || p.Annotations[mirrorKey] != ""
}

func TestMetricsAndStockCounter(t *testing.T) {
	critletmetrics.Register()
	registerKubeletMetrics.Do(func() { kubeletmetrics.Register() })
	pods := uniformNode(6)
	script := &killScript{fail: map[string]bool{"pod-05": true}, hang: map[string]bool{}, stuck: make(chan struct{})}
	opts := settings.Settings{Policy: victims.PolicyPriority, Parallelism: 2, MaxReplans: 1}
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
	// The stock counter: one per victim terminated (two of the three), under
	// the first insufficient resource.
	if d := after.preemptions - before.preemptions; d != 2 {
		t.Errorf("kubelet_preemptions{preemption_signal=memory} +%v, want +2", d)
	}
}

// A victim given up on is counted once, as a timeout: not as preempted, not
// as failed, and without the stock success line, when its kill ends later.
func TestTimedOutVictimIsCountedOnce(t *testing.T) {
	critletmetrics.Register()
	registerKubeletMetrics.Do(func() { kubeletmetrics.Register() })
	pods := uniformNode(3)
	stuck := make(chan struct{})
	returned := make(chan struct{})
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		if pod.Name == "pod-02" {
			<-stuck
			defer close(returned)
		}
		return nil
	}
	opts := settings.Settings{Policy: victims.PolicyUpstream, Parallelism: 4, KillTimeout: 10 * time.Millisecond}
	h := newHandler(func() []*v1.Pod { return pods }, kill, &record.FakeRecorder{}, opts)
	logs := &logCapture{}
	beforeTimeouts, _ := testutil.GetCounterMetricValue(critletmetrics.KillFailures.WithLabelValues("upstream", "timeout"))
	beforeErrors, _ := testutil.GetCounterMetricValue(critletmetrics.KillFailures.WithLabelValues("upstream", "error"))
	beforeStock, _ := testutil.GetCounterMetricValue(kubeletmetrics.Preemptions.WithLabelValues("memory"))
	// Three pods of 100Mi for 250Mi: all three are victims; pod-02 hangs.
	if _, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logs.logger()), clusterCritPod, memoryShortfall(250), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	close(stuck)
	<-returned
	// The late report runs right after the kill returns; let it land.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(logs.lines(), func(l string) bool { return strings.Contains(l, "after admission stopped waiting") }) {
		if time.Now().After(deadline) {
			t.Fatalf("no late report in %q", logs.lines())
		}
		time.Sleep(time.Millisecond)
	}
	timeouts, _ := testutil.GetCounterMetricValue(critletmetrics.KillFailures.WithLabelValues("upstream", "timeout"))
	errs, _ := testutil.GetCounterMetricValue(critletmetrics.KillFailures.WithLabelValues("upstream", "error"))
	stockCount, _ := testutil.GetCounterMetricValue(kubeletmetrics.Preemptions.WithLabelValues("memory"))
	if timeouts-beforeTimeouts != 1 || errs-beforeErrors != 0 || stockCount-beforeStock != 2 {
		t.Errorf("timeouts +%v, errors +%v, kubelet_preemptions +%v; want +1, +0, +2", timeouts-beforeTimeouts, errs-beforeErrors, stockCount-beforeStock)
	}
	var successes []string
	for _, l := range logs.lines() {
		if strings.Contains(l, "Pod evicted successfully") {
			successes = append(successes, l)
		}
	}
	if len(successes) != 2 || slices.ContainsFunc(successes, func(l string) bool { return strings.Contains(l, "pod-02") }) {
		t.Errorf("success lines %q, want two, none for the timed-out pod-02", successes)
	}
}

func TestKillWaitCoversTheGracePeriod(t *testing.T) {
	withGrace := func(s *int64) *v1.Pod {
		p := castPod("p", "100m", "100Mi", false, nil)
		p.Spec.TerminationGracePeriodSeconds = s
		return p
	}
	tests := []struct {
		killTimeout time.Duration
		grace       *int64
		want        time.Duration
	}{
		{0, ptr(int64(30)), 0},                        // wait as the pod workers do
		{5 * time.Second, nil, 5 * time.Second},       // no grace period: the setting
		{time.Second, ptr(int64(0)), 2 * time.Second}, // the forced stop's allowance
		{5 * time.Second, ptr(int64(30)), 32 * time.Second},
		{time.Minute, ptr(int64(30)), time.Minute},
	}
	for _, tc := range tests {
		h := newHandler(nil, nil, nil, settings.Settings{Policy: victims.PolicyUpstream, Parallelism: 1, KillTimeout: tc.killTimeout})
		if got := h.killWait(withGrace(tc.grace)); got != tc.want {
			t.Errorf("kill timeout %s, grace %v: waits %s, want %s", tc.killTimeout, tc.grace, got, tc.want)
		}
	}
}

// A victim slower than the kill timeout but within its grace period is not
// a failure: nothing is re-planned.
func TestSlowVictimWithinGracePeriodIsNotReplaced(t *testing.T) {
	pods := uniformNode(4)
	for _, p := range pods {
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(1))
	}
	var mu sync.Mutex
	var killed []string
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		mu.Lock()
		killed = append(killed, pod.Name)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		return nil
	}
	rec := record.NewFakeRecorder(20)
	opts := settings.Settings{Policy: victims.PolicyUpstream, Parallelism: 4, MaxReplans: 2, KillTimeout: 10 * time.Millisecond}
	h := newHandler(func() []*v1.Pod { return pods }, kill, rec, opts)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(150), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	if len(killed) != 2 {
		t.Fatalf("killed %v, want the two planned victims only", killed)
	}
	close(rec.Events)
	for e := range rec.Events {
		if !strings.HasPrefix(e, "Warning Preempting ") && !strings.HasPrefix(e, "Normal "+reasonPreempted+" ") {
			t.Errorf("event %q: want only the victims' and %s", e, reasonPreempted)
		}
	}
}

// Once the kubelet's context is done, no further victim is started and no
// re-planning round runs; the pod is admitted, as after failed kills.
func TestCancelledAdmissionStartsNoFurtherKills(t *testing.T) {
	pods := uniformNode(6)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	defer cancel()
	var killed []string
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		killed = append(killed, pod.Name)
		cancel() // the kubelet shuts down during the first kill
		return errors.New("stopped")
	}
	opts := settings.Settings{Policy: victims.PolicyUpstream, Parallelism: 1, MaxReplans: 3}
	rec := record.NewFakeRecorder(20)
	h := newHandler(func() []*v1.Pod { return pods }, kill, rec, opts)
	reasons, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(250), lifecycle.AddOperation)
	if err != nil || len(reasons) != 0 {
		t.Fatalf("not admitted: %v %v", reasons, err)
	}
	if len(killed) != 1 {
		t.Fatalf("killed %v after the context was done; want only the first victim", killed)
	}
	close(rec.Events)
	var incomplete int
	for e := range rec.Events {
		if strings.HasPrefix(e, "Warning "+reasonPreemptionIncomplete+" ") {
			incomplete++
		}
	}
	if incomplete != 1 {
		t.Fatalf("want one %s event", reasonPreemptionIncomplete)
	}
}

type counts struct{ failures, replans, admissions, selections, victimSum, preemptions float64 }

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
	c.failures = must(testutil.GetCounterMetricValue(critletmetrics.KillFailures.WithLabelValues("priority", "error")))
	c.replans = must(testutil.GetCounterMetricValue(critletmetrics.Replans.WithLabelValues("priority")))
	ac, e := testutil.GetHistogramMetricCount(critletmetrics.AdmissionDuration.WithLabelValues("priority"))
	c.admissions = float64(must(float64(ac), e))
	sc, e := testutil.GetHistogramMetricCount(critletmetrics.SelectionDuration.WithLabelValues("priority"))
	c.selections = must(float64(sc), e)
	vs, e := testutil.GetHistogramMetricValue(critletmetrics.VictimsPerAdmission.WithLabelValues("priority"))
	c.victimSum = must(vs, e)
	c.preemptions = must(testutil.GetCounterMetricValue(kubeletmetrics.Preemptions.WithLabelValues("memory")))
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
			opts := settings.Defaults()
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

// On kubelet shutdown (the context HandleAdmissionFailure gets is done while
// victims terminate), compared with the stock kubelet. Stock ignores the
// context: it calls every planned victim's kill, one after another, each
// waited for, and then admits. critlet starts no further kill and no
// re-planning round, stops waiting for the kills in flight (the pod workers
// go on with them) and admits at once with a PreemptionIncomplete event.
// With the default parallelism every victim's kill was already in flight, so
// both kubelets ask for the same kills; one at a time, critlet asks for
// fewer. Neither refuses the critical pod.
func TestShutdownComparedWithStock(t *testing.T) {
	pods := uniformNode(3)
	type result struct {
		kills          int
		returnedFirst  bool // returned before any kill was let finish
		admitted       bool
		admitPodEvents []string
	}
	drive := func(impl implementation, inFlight int, returnsFirst bool) result {
		var mu sync.Mutex
		var res result
		arrived := make(chan struct{}, len(pods))
		release := make(chan struct{})
		kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
			mu.Lock()
			res.kills++
			mu.Unlock()
			arrived <- struct{}{}
			<-release
			return nil
		}
		rec := &eventCapture{}
		h := impl(func() []*v1.Pod { return pods }, kill, rec)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
		defer cancel()
		returned := make(chan []lifecycle.PredicateFailureReason, 1)
		go func() {
			reasons, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(250), lifecycle.AddOperation)
			if err != nil {
				t.Errorf("refused on shutdown: %v", err)
			}
			returned <- reasons
		}()
		for range inFlight {
			<-arrived
		}
		cancel()
		// An implementation expected to return while its kills are held
		// gets ample time to; one expected to wait for them cannot return
		// before they are released, so a short look suffices.
		wait := 300 * time.Millisecond
		if returnsFirst {
			wait = 10 * time.Second
		}
		var reasons []lifecycle.PredicateFailureReason
		select {
		case reasons = <-returned:
			res.returnedFirst = true
			close(release)
		case <-time.After(wait):
			close(release)
			reasons = <-returned
		}
		res.admitted = len(reasons) == 0
		for _, e := range rec.list() {
			if e.object == clusterCritPod.Namespace+"/"+clusterCritPod.Name {
				res.admitPodEvents = append(res.admitPodEvents, strings.Fields(e.text)[1])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return res
	}
	for _, tc := range []struct {
		name     string
		impl     implementation
		inFlight int
		want     result
	}{
		{"stock", stockHandler, 1, result{kills: 3, admitted: true}},
		{"critlet defaults", critletHandler(settings.Defaults()), 3,
			result{kills: 3, returnedFirst: true, admitted: true, admitPodEvents: []string{reasonPreemptionIncomplete}}},
		{"critlet one at a time", critletHandler(settings.Upstream()), 1,
			result{kills: 1, returnedFirst: true, admitted: true, admitPodEvents: []string{reasonPreemptionIncomplete}}},
	} {
		if got := drive(tc.impl, tc.inFlight, tc.want.returnedFirst); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The parallelism bounds the kills in flight across all re-planning rounds
// of one admission: victims given up on after the kill timeout keep their
// slots until their kills return, so the next round waits for them.
func TestParallelismHoldsAcrossReplanningRounds(t *testing.T) {
	const parallelism = 2
	pods := uniformNode(6)
	var mu sync.Mutex
	var inFlight, peak, calls int
	release := make(chan struct{})
	kill := func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error {
		mu.Lock()
		calls++
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	opts := settings.Settings{Policy: victims.PolicyUpstream, Parallelism: parallelism, MaxReplans: 2, KillTimeout: 10 * time.Millisecond}
	h := newHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(50), opts)
	done := make(chan error, 1)
	go func() {
		_, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logr.Discard()), clusterCritPod, memoryShortfall(150), lifecycle.AddOperation)
		done <- err
	}()
	// Round 1's two victims time out after the forced stop's allowance
	// (their grace period is 0); round 2 is planned but must wait for their
	// slots.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= parallelism || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(forcedStopAllowance + 500*time.Millisecond)
	mu.Lock()
	early := calls
	mu.Unlock()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if early != parallelism || peak > parallelism {
		t.Fatalf("%d kills called while the first round's hung, %d in flight at most; want %d and at most %d", early, peak, parallelism, parallelism)
	}
	if calls <= parallelism {
		t.Fatalf("%d kills in all: re-planning never ran", calls)
	}
}
