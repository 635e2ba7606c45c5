package preemption

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/settings"
	"github.com/critlet/critlet/pkg/victims"
)

// outcome is everything one HandleAdmissionFailure call did.
type outcome struct {
	reasons []string
	err     string
	kills   []kill   // in the order the kill function was called
	events  []string // on pods other than the critical one, in the order recorded
	logs    []string // every log entry, in order
	// preemptions is how much kubelet_preemptions grew, per
	// preemption_signal label (labels that did not grow are absent).
	preemptions map[string]float64
	// admitPodEvents are the events on the critical pod: none from the
	// stock kubelet, one per admission from critlet (checkAdmitPodEvents).
	admitPodEvents []string
}

type kill struct {
	uid         string
	evicted     bool
	gracePeriod *int64
	status      v1.PodStatus // the status function applied to the pod's status
	failed      bool         // the kill function returned an error
}

// handler is the public API both implementations share.
type handler interface {
	HandleAdmissionFailure(context.Context, *v1.Pod, []lifecycle.PredicateFailureReason, lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error)
}

type implementation func(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler

func stockHandler(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
	return stock.NewCriticalPodAdmissionHandler(getPods, kill, rec)
}

func critletHandler(opts settings.Settings) implementation {
	return func(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
		return newHandler(getPods, kill, rec, opts)
	}
}

// failSome fails the kill of about a third of the pods, by UID, the same
// ones for both kubelets.
func failSome(pod *v1.Pod) bool {
	h := fnv.New32a()
	h.Write([]byte(pod.UID))
	return h.Sum32()%3 == 0
}

var registerKubeletMetrics sync.Once

// preemptionsByLabel reads kubelet_preemptions under every label a
// shortfall of the generated nodes can name (gathering the whole registry
// instead would cost more than the handlers themselves).
func preemptionsByLabel(t testing.TB) map[string]float64 {
	registerKubeletMetrics.Do(func() { kubeletmetrics.Register() })
	out := map[string]float64{}
	for _, label := range []string{"", "cpu", "memory", "ephemeral-storage", "pods", string(gpu)} {
		v, err := testutil.GetCounterMetricValue(kubeletmetrics.Preemptions.WithLabelValues(label))
		if err != nil {
			t.Fatal(err)
		}
		out[label] = v
	}
	return out
}

// grown returns the labels whose value grew from before to after, by how
// much.
func grown(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for label, v := range after {
		if d := v - before[label]; d != 0 {
			out[label] = d
		}
	}
	return out
}

// run calls impl's HandleAdmissionFailure once; the kills of pods for which
// failing returns true (nil: none) return an error.
func run(t testing.TB, impl implementation, admitPod *v1.Pod, pods []*v1.Pod, reasons []lifecycle.PredicateFailureReason, op lifecycle.Operation, failing func(*v1.Pod) bool) outcome {
	var out outcome
	var mu sync.Mutex
	rec := &eventCapture{}
	logs := &logCapture{}
	h := impl(
		func() []*v1.Pod { return append([]*v1.Pod(nil), pods...) },
		func(pod *v1.Pod, evicted bool, grace *int64, fn func(*v1.PodStatus)) error {
			status := *pod.Status.DeepCopy()
			fn(&status)
			for i := range status.Conditions {
				status.Conditions[i].LastTransitionTime = metav1.Time{}
				status.Conditions[i].LastProbeTime = metav1.Time{}
			}
			fail := failing != nil && failing(pod)
			mu.Lock()
			out.kills = append(out.kills, kill{string(pod.UID), evicted, grace, status, fail})
			mu.Unlock()
			if fail {
				return errors.New("runtime refused to stop the pod")
			}
			return nil
		}, rec)
	before := preemptionsByLabel(t)
	got, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logs.logger()), admitPod, reasons, op)
	out.preemptions = grown(before, preemptionsByLabel(t))
	for _, r := range got {
		out.reasons = append(out.reasons, fmt.Sprintf("%T %s", r, r.GetReason()))
	}
	if err != nil {
		out.err = err.Error()
	}
	admitPodName := admitPod.Namespace + "/" + admitPod.Name
	for _, e := range rec.list() {
		if e.object == admitPodName {
			out.admitPodEvents = append(out.admitPodEvents, e.text)
		} else {
			out.events = append(out.events, e.text)
		}
	}
	out.logs = logs.lines()
	return out
}

// startLine begins the log entry the stock kubelet writes as it starts each
// victim's kill.
const startLine = "info V2 Preempting pod to free up resources "

// compare reports how got differs from want. Compared exactly, always: the
// reasons and error returned; every kill (its pod, arguments and the status
// it applies) and whether it failed; every event on every pod but the
// critical one, in the order recorded (the victims' Preempting events,
// recorded as each kill starts); every log entry at every verbosity; and the
// growth of kubelet_preemptions per label. The events on the critical pod
// are critlet's own, checked apart by checkAdmitPodEvents.
//
// With ordered (one victim at a time) all of it is in the same order. Without
// it (victims terminated concurrently), the kills still start in the stock
// order, so the Preempting events and the "Preempting pod to free up
// resources" lines keep that order and are compared in it; the kill calls
// themselves and the lines written as each kill returns ("Pod evicted
// successfully", "Failed to evict pod") come from concurrent goroutines in no
// fixed order, so they are compared as sets (kills sorted by pod, log entries
// sorted), which still demands every one of them, once each.
func compare(want, got outcome, ordered bool) error {
	want.admitPodEvents, got.admitPodEvents = nil, nil
	if !ordered {
		for _, o := range []*outcome{&want, &got} {
			var starts []string
			for _, l := range o.logs {
				if strings.HasPrefix(l, startLine) {
					starts = append(starts, l)
				}
			}
			o.logs = append(starts, sorted(o.logs)...)
			o.kills = slices.Clone(o.kills)
			slices.SortStableFunc(o.kills, func(a, b kill) int { return strings.Compare(a.uid, b.uid) })
		}
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	var diffs []string
	add := func(what string, w, g any) {
		if !reflect.DeepEqual(w, g) {
			diffs = append(diffs, fmt.Sprintf("%s:\n  stock   %v\n  critlet %v", what, w, g))
		}
	}
	add("reasons", want.reasons, got.reasons)
	add("error", want.err, got.err)
	add("kills", want.kills, got.kills)
	add("events", strings.Join(want.events, "\n           "), strings.Join(got.events, "\n           "))
	add("log lines", strings.Join(want.logs, "\n           "), strings.Join(got.logs, "\n           "))
	add("kubelet_preemptions by label", want.preemptions, got.preemptions)
	return errors.New(strings.Join(diffs, "\n"))
}

// checkAdmitPodEvents checks the events on the critical pod: none from the
// stock kubelet; from critlet exactly one whenever preemption was attempted
// (PreemptionImpossible for a refusal, PreemptedForAdmission when every
// victim terminated, a warning when some did not), none otherwise. It
// returns the critlet event's reason.
func checkAdmitPodEvents(want, got outcome) (string, error) {
	if len(want.admitPodEvents) != 0 {
		return "", fmt.Errorf("the stock kubelet recorded events on the critical pod: %q", want.admitPodEvents)
	}
	failed := slices.ContainsFunc(want.kills, func(k kill) bool { return k.failed })
	var allowed []string
	switch {
	case want.err != "":
		allowed = []string{v1.EventTypeWarning + " " + reasonPreemptionImpossible}
	case len(want.kills) == 0:
		if len(got.admitPodEvents) != 0 {
			return "", fmt.Errorf("events on the critical pod though nothing was preempted: %q", got.admitPodEvents)
		}
		return "", nil
	case failed:
		allowed = []string{v1.EventTypeWarning + " " + reasonPreemptionIncomplete, v1.EventTypeWarning + " " + reasonPreemptionReplanned}
	default:
		allowed = []string{v1.EventTypeNormal + " " + reasonPreempted}
	}
	if len(got.admitPodEvents) != 1 {
		return "", fmt.Errorf("%d events on the critical pod, want one of %q: %q", len(got.admitPodEvents), allowed, got.admitPodEvents)
	}
	for _, a := range allowed {
		if strings.HasPrefix(got.admitPodEvents[0], a+" ") {
			return strings.Fields(a)[1], nil
		}
	}
	return "", fmt.Errorf("event on the critical pod %q, want one of %q", got.admitPodEvents[0], allowed)
}

// coverage counts what the differential runs compared, so that a generator
// that stops producing some case fails the test instead of passing it by.
type coverage struct {
	nodes, withVictims, refused, passedThrough int
	killFailures                               int // failed kills compared
	multiResourceLabels                        int // admissions short of several resources that counted preemptions
	victimEvents                               int // Preempting events compared
	logLines                                   int
	admitPodEvents                             map[string]int // critlet's, by reason
}

func (c *coverage) add(want outcome, admitPodReason string) {
	c.nodes++
	switch {
	case len(want.kills) > 0:
		c.withVictims++
	case want.err != "":
		c.refused++
	default:
		c.passedThrough++
	}
	for _, k := range want.kills {
		if k.failed {
			c.killFailures++
		}
	}
	c.victimEvents += len(want.events)
	c.logLines += len(want.logs)
	if admitPodReason != "" {
		if c.admitPodEvents == nil {
			c.admitPodEvents = map[string]int{}
		}
		c.admitPodEvents[admitPodReason]++
	}
}

// check fails when some case was compared too rarely to mean anything.
func (c *coverage) check(t *testing.T) {
	t.Helper()
	t.Logf("%d nodes, all exact: %d preempted, %d refused, %d passed through; compared %d failed kills, %d multi-resource shortfalls' preemption labels, %d victim events, %d log lines; critlet's events on the critical pod %v",
		c.nodes, c.withVictims, c.refused, c.passedThrough, c.killFailures, c.multiResourceLabels, c.victimEvents, c.logLines, c.admitPodEvents)
	min := c.nodes / 100
	if c.withVictims < c.nodes/3 || c.refused < min || c.passedThrough < min || c.killFailures < min ||
		c.multiResourceLabels < min || c.victimEvents < c.nodes/3 || c.logLines == 0 ||
		c.admitPodEvents[reasonPreempted] < min || c.admitPodEvents[reasonPreemptionImpossible] < min || c.admitPodEvents[reasonPreemptionIncomplete] < min {
		t.Fatalf("generator too narrow: each kind must be compared at least %d times", min)
	}
}

func TestDifferentialAgainstStock(t *testing.T) {
	cases := 30000
	if testing.Short() {
		cases = 3000
	}
	for _, gates := range []struct {
		name     string
		podLevel bool
	}{{"pod-level-resources-on", true}, {"pod-level-resources-off", false}} {
		t.Run(gates.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResources, gates.podLevel)
			r := rand.New(rand.NewPCG(7, uint64(len(gates.name))))
			var cov coverage
			n := cases / 2
			for c := range n {
				g := &nodeGen{r: r, tieHeavy: c%3 == 0, exotic: c%2 == 0}
				size := r.IntN(40)
				if c%100 == 0 {
					size = 110 + r.IntN(300)
				}
				pods := g.pods(size)
				admitPod := g.criticalPod()
				if c%20 == 0 {
					admitPod = g.pod() // usually not critical
				}
				reasons := g.reasons(pods, r.Float64()*0.6)
				op := lifecycle.AddOperation
				if c%40 == 0 {
					op = lifecycle.ResizeOperation
				}
				var failing func(*v1.Pod) bool
				if c%5 == 0 {
					failing = failSome
				}
				want := run(t, stockHandler, admitPod, pods, reasons, op, failing)
				checkPlan(t, c, admitPod, pods, reasons, op, want)
				// One victim at a time, everything in the stock order; then
				// the default settings, victims terminated concurrently.
				for _, impl := range []struct {
					what    string
					opts    settings.Settings
					ordered bool
				}{{"one at a time", settings.Upstream(), true}, {"default settings", settings.Defaults(), false}} {
					got := run(t, critletHandler(impl.opts), admitPod, pods, reasons, op, failing)
					if err := compare(want, got, impl.ordered); err != nil {
						t.Fatalf("case %d (%d pods, reasons %v), %s:\n%v", c, len(pods), reasons, impl.what, err)
					}
					reason, err := checkAdmitPodEvents(want, got)
					if err != nil {
						t.Fatalf("case %d (%d pods, reasons %v), %s: %v", c, len(pods), reasons, impl.what, err)
					}
					if impl.ordered {
						cov.add(want, reason)
					}
				}
				if len(reasons) > 1 && len(want.preemptions) > 0 {
					cov.multiResourceLabels++
				}
			}
			cov.check(t)
		})
	}
}

// checkPlan checks that Plan, critlet-explain's answer, names the pods the
// stock kubelet killed, in its order, and refuses where it refused.
func checkPlan(t *testing.T, c int, admitPod *v1.Pod, pods []*v1.Pod, reasons []lifecycle.PredicateFailureReason, op lifecycle.Operation, want outcome) {
	t.Helper()
	reqs, other := planning.Shortfall(reasons)
	if !kubetypes.IsCriticalPod(admitPod) || op != lifecycle.AddOperation || len(other) > 0 || len(reqs) == 0 {
		return
	}
	planned, err := planning.Plan(victims.PolicyUpstream, admitPod, pods, reqs)
	var got, killed []string
	for _, p := range planned {
		got = append(got, string(p.UID))
	}
	for _, k := range want.kills {
		killed = append(killed, k.uid)
	}
	if (err != nil) != (want.err != "") || !slices.Equal(got, killed) {
		t.Fatalf("case %d: Plan %v (err %v), the stock kubelet killed %v (err %q)", c, got, err, killed, want.err)
	}
}
