package preemption

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	stock "k8s.io/kubernetes/pkg/kubelet/preemption"

	"github.com/critlet/critlet/pkg/kubelet/preemption/options"
)

// outcome is everything one HandleAdmissionFailure call did.
type outcome struct {
	reasons []string
	err     string
	kills   []kill
	events  []string
	// preemptorEvents are left out of comparisons.
	preemptorEvents []string
	signature       [][]string // per victim: what makes victims interchangeable
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

// failKill makes the kill of some pods fail, the same ones for both kubelets.
func failKill(pod *v1.Pod) bool { return len(pod.Name)%7 == 3 }

func run(newHandler func(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler,
	admitPod *v1.Pod, pods []*v1.Pod, reasons []lifecycle.PredicateFailureReason, op lifecycle.Operation, killErrors bool) outcome {
	var out outcome
	rec := record.NewFakeRecorder(len(pods) + 10)
	h := newHandler(
		func() []*v1.Pod { return append([]*v1.Pod(nil), pods...) },
		func(pod *v1.Pod, evicted bool, grace *int64, fn func(*v1.PodStatus)) error {
			status := *pod.Status.DeepCopy()
			fn(&status)
			for i := range status.Conditions {
				status.Conditions[i].LastTransitionTime = metav1.Time{}
				status.Conditions[i].LastProbeTime = metav1.Time{}
			}
			out.kills = append(out.kills, kill{string(pod.UID), evicted, grace, status})
			out.signature = append(out.signature, victimSignature(pod))
			if killErrors && failKill(pod) {
				return errors.New("runtime refused to stop the pod")
			}
			return nil
		}, rec)
	got, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logr.Discard()), admitPod, reasons, op)
	for _, r := range got {
		out.reasons = append(out.reasons, fmt.Sprintf("%T %s", r, r.GetReason()))
	}
	if err != nil {
		out.err = err.Error()
	}
	close(rec.Events)
	for e := range rec.Events {
		// critlet adds one event on the critical pod; the stock kubelet has
		// none there. Victims' events must match exactly.
		if strings.HasPrefix(e, v1.EventTypeWarning+" "+events.PreemptContainer+" ") {
			out.events = append(out.events, e)
		} else {
			out.preemptorEvents = append(out.preemptorEvents, e)
		}
	}
	return out
}

// victimSignature is what two pods must share for the stock kubelet's choice
// between them to depend only on their order: class and every request.
func victimSignature(pod *v1.Pod) []string {
	sig := []string{string(pod.Status.QOSClass)}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, gpu} {
		sig = append(sig, fmt.Sprint(requestOf(pod, name)))
	}
	return sig
}

func stockHandler(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
	return stock.NewCriticalPodAdmissionHandler(getPods, kill, rec)
}

func critletHandler(getPods func() []*v1.Pod, kill func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error, rec record.EventRecorder) handler {
	return newHandler(getPods, kill, rec, options.Upstream())
}

// compare reports whether critlet's outcome equals the stock one exactly,
// or up to interchangeable victims; anything else is a mismatch.
func compare(want, got outcome) (exact bool, err error) {
	want.preemptorEvents, got.preemptorEvents = nil, nil
	if reflect.DeepEqual(want, got) {
		return true, nil
	}
	if !reflect.DeepEqual(want.reasons, got.reasons) || want.err != got.err || !reflect.DeepEqual(want.events, got.events) ||
		!reflect.DeepEqual(want.signature, got.signature) || len(want.kills) != len(got.kills) {
		return false, fmt.Errorf("stock %+v\ncritlet %+v", want, got)
	}
	for i := range want.kills {
		w, g := want.kills[i], got.kills[i]
		w.uid, g.uid = "", ""
		if !reflect.DeepEqual(w, g) {
			return false, fmt.Errorf("kill %d: stock %+v\ncritlet %+v", i, want.kills[i], got.kills[i])
		}
	}
	return false, nil
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
			var exact, interchangeable, withVictims, refused, passedThrough int
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
				want := run(stockHandler, admitPod, pods, reasons, op, killErrors)
				got := run(critletHandler, admitPod, pods, reasons, op, killErrors)
				same, err := compare(want, got)
				if err != nil {
					t.Fatalf("case %d (%d pods, reasons %v): %v", c, len(pods), reasons, err)
				}
				if same {
					exact++
				} else {
					interchangeable++
				}
				switch {
				case len(want.kills) > 0:
					withVictims++
				case want.err != "":
					refused++
				default:
					passedThrough++
				}
			}
			t.Logf("%d nodes: %d exact, %d with interchangeable victims; %d preempted, %d refused, %d passed through",
				n, exact, interchangeable, withVictims, refused, passedThrough)
			if withVictims < n/3 || refused == 0 || passedThrough == 0 {
				t.Fatalf("generator too narrow: %d preempted, %d refused, %d passed through", withVictims, refused, passedThrough)
			}
		})
	}
}
