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
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/kubelet/preemption/options"
	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
)

// outcome is everything one HandleAdmissionFailure call did.
type outcome struct {
	reasons []string
	err     string
	kills   []kill   // in the order the kill function was called
	events  []string // on victims, in the order recorded
	logs    []string // every log entry, in order
	// preemptions is how much kubelet_preemptions grew.
	preemptions float64
	// preemptorEvents are critlet's own, left out of comparisons.
	preemptorEvents []string
}

type kill struct {
	uid         string
	evicted     bool
	gracePeriod *int64
	status      v1.PodStatus // the status function applied to the pod's status
}

// handler is the public API both implementations share.
type handler interface {
	HandleAdmissionFailure(context.Context, *v1.Pod, []lifecycle.PredicateFailureReason, lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error)
}

type implementation func(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler

func stockHandler(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
	return stock.NewCriticalPodAdmissionHandler(getPods, kill, rec)
}

func critletHandler(opts options.Options) implementation {
	return func(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
		return newHandler(getPods, kill, rec, opts)
	}
}

// failKill makes the kill of some pods fail, the same ones for both kubelets.
func failKill(pod *v1.Pod) bool { return len(pod.Name)%7 == 3 }

var registerKubeletMetrics sync.Once

// preemptionCount reads kubelet_preemptions, summed over the labels the
// generated nodes use.
func preemptionCount(t testing.TB) float64 {
	registerKubeletMetrics.Do(func() { kubeletmetrics.Register() })
	var sum float64
	for _, label := range []string{"", "cpu", "memory", "ephemeral-storage", "pods", string(gpu)} {
		v, err := testutil.GetCounterMetricValue(kubeletmetrics.Preemptions.WithLabelValues(label))
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

func run(t testing.TB, impl implementation, admitPod *v1.Pod, pods []*v1.Pod, reasons []lifecycle.PredicateFailureReason, op lifecycle.Operation, killErrors bool) outcome {
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
			mu.Lock()
			out.kills = append(out.kills, kill{string(pod.UID), evicted, grace, status})
			mu.Unlock()
			if killErrors && failKill(pod) {
				return errors.New("runtime refused to stop the pod")
			}
			return nil
		}, rec)
	before := preemptionCount(t)
	got, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logs.logger()), admitPod, reasons, op)
	out.preemptions = preemptionCount(t) - before
	for _, r := range got {
		out.reasons = append(out.reasons, fmt.Sprintf("%T %s", r, r.GetReason()))
	}
	if err != nil {
		out.err = err.Error()
	}
	for _, e := range rec.list() {
		// critlet adds one event on the critical pod; the stock kubelet has
		// none there. Victims' events must match exactly.
		if strings.HasPrefix(e, v1.EventTypeWarning+" "+events.PreemptContainer+" ") {
			out.events = append(out.events, e)
		} else {
			out.preemptorEvents = append(out.preemptorEvents, e)
		}
	}
	out.logs = logs.lines()
	return out
}

// startLine begins the log entry the stock kubelet writes as it starts each
// victim's kill.
const startLine = "info V2 Preempting pod to free up resources "

// compare reports how got differs from want: in nothing but critlet's own
// events on the critical pod. With ordered, everything happens in the same
// order. Without it (victims terminated concurrently), victims still start in
// the same order, with the same events and log lines, but their kills and
// the lines written as kills return may interleave differently.
func compare(want, got outcome, ordered bool) error {
	want.preemptorEvents, got.preemptorEvents = nil, nil
	if !ordered {
		for _, o := range []*outcome{&want, &got} {
			var starts []string
			for _, l := range o.logs {
				if strings.HasPrefix(l, startLine) {
					starts = append(starts, l)
				}
			}
			o.logs = append(starts, sorted(o.logs)...)
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
	add("victim events", want.events, got.events)
	add("log lines", strings.Join(want.logs, "\n           "), strings.Join(got.logs, "\n           "))
	add("kubelet_preemptions", want.preemptions, got.preemptions)
	return errors.New(strings.Join(diffs, "\n"))
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
			var withVictims, refused, passedThrough, killLines int
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
				killErrors := c%10 == 0
				want := run(t, stockHandler, admitPod, pods, reasons, op, killErrors)
				// Before compare, which sorts the kills of unordered runs.
				checkPlan(t, c, admitPod, pods, reasons, op, want)
				// One victim at a time, everything in the stock order; then
				// the default settings, victims terminated concurrently.
				if err := compare(want, run(t, critletHandler(options.Upstream()), admitPod, pods, reasons, op, killErrors), true); err != nil {
					t.Fatalf("case %d (%d pods, reasons %v), one at a time:\n%v", c, len(pods), reasons, err)
				}
				if err := compare(want, run(t, critletHandler(options.Defaults()), admitPod, pods, reasons, op, killErrors), false); err != nil {
					t.Fatalf("case %d (%d pods, reasons %v), default settings:\n%v", c, len(pods), reasons, err)
				}
				killLines += len(want.logs)
				switch {
				case len(want.kills) > 0:
					withVictims++
				case want.err != "":
					refused++
				default:
					passedThrough++
				}
			}
			t.Logf("%d nodes, all exact: %d preempted, %d refused, %d passed through; %d stock log lines matched",
				n, withVictims, refused, passedThrough, killLines)
			if withVictims < n/3 || refused == 0 || passedThrough == 0 || killLines == 0 {
				t.Fatalf("generator too narrow: %d preempted, %d refused, %d passed through, %d log lines", withVictims, refused, passedThrough, killLines)
			}
		})
	}
}

// checkPlan checks that Plan, critlet-explain's answer, names the pods the
// stock kubelet killed, in its order, and refuses where it refused.
func checkPlan(t *testing.T, c int, admitPod *v1.Pod, pods []*v1.Pod, reasons []lifecycle.PredicateFailureReason, op lifecycle.Operation, want outcome) {
	t.Helper()
	reqs, other := Shortfall(reasons)
	if !kubetypes.IsCriticalPod(admitPod) || op != lifecycle.AddOperation || len(other) > 0 || len(reqs) == 0 {
		return
	}
	planned, err := Plan(victims.PolicyUpstream, admitPod, pods, reqs)
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
