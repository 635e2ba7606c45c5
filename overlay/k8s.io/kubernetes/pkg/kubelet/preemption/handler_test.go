package preemption

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	k8stypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/settings"
)

// A small cast of pods, named for what they are.
func castPod(name string, cpu, mem string, guaranteed bool, priority *int32) *v1.Pod {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = name, "default", k8stypes.UID("uid-"+name)
	c := v1.Container{Name: "main"}
	if cpu != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		if guaranteed {
			c.Resources.Limits = c.Resources.Requests.DeepCopy()
		}
	}
	pod.Spec.Containers = []v1.Container{c}
	pod.Spec.Priority = priority
	return pod
}

func ptr[T any](v T) *T { return &v }

var (
	bestEffortPod    = castPod("best-effort", "", "", false, nil)
	smallBurstable   = castPod("small-burstable", "100m", "100Mi", false, nil)
	largeBurstable   = castPod("large-burstable", "300m", "300Mi", false, nil)
	smallGuaranteed  = castPod("small-guaranteed", "100m", "100Mi", true, nil)
	largeGuaranteed  = castPod("large-guaranteed", "300m", "300Mi", true, nil)
	clusterCritPod   = withNamespace(castPod("cluster-critical", "100m", "100Mi", false, ptr(clusterCrit)), "kube-system")
	nodeCritPod      = withNamespace(castPod("node-critical", "100m", "100Mi", false, ptr(nodeCrit)), "kube-system")
	nonCriticalAdmit = castPod("plain", "100m", "100Mi", true, nil)
	mi               = int64(1 << 20)
	otherFailure     = &lifecycle.PredicateFailureError{PredicateName: "NodeAffinity", PredicateDesc: "node(s) didn't match Pod's node affinity/selector"}
	insufficientOf   = func(name v1.ResourceName, amount int64) lifecycle.PredicateFailureReason {
		return &lifecycle.InsufficientResourceError{ResourceName: name, Requested: amount, Used: 0, Capacity: 0}
	}
)

func withNamespace(p *v1.Pod, ns string) *v1.Pod { p.Namespace = ns; return p }

func TestHandleAdmissionFailureScenarios(t *testing.T) {
	tests := []struct {
		name        string
		admit       *v1.Pod
		pods        []*v1.Pod
		reasons     []lifecycle.PredicateFailureReason
		op          lifecycle.Operation
		resizeGate  bool
		killFails   bool
		wantErr     bool
		wantKilled  []string
		wantReasons []string
	}{
		{
			name:  "a critical pod cannot preempt another critical pod of the same priority",
			admit: clusterCritPod, pods: []*v1.Pod{clusterCritPod},
			reasons: []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourcePods, 1)},
			wantErr: true,
		},
		{
			name:  "a non-critical pod keeps its reasons and preempts nothing",
			admit: nonCriticalAdmit, pods: []*v1.Pod{smallBurstable},
			reasons:     []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, mi)},
			wantReasons: []string{"Insufficient memory"},
		},
		{
			name:  "a BestEffort pod frees no memory, so the need cannot be met",
			admit: clusterCritPod, pods: []*v1.Pod{bestEffortPod},
			reasons: []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, mi)},
			wantErr: true,
		},
		{
			name:       "Guaranteed is preempted only for what Burstable and BestEffort cannot free",
			admit:      clusterCritPod,
			pods:       []*v1.Pod{clusterCritPod, bestEffortPod, smallBurstable, largeBurstable, smallGuaranteed, largeGuaranteed},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, 550*mi)},
			wantKilled: []string{"large-burstable", "large-guaranteed"},
		},
		{
			name:       "a failed kill is logged and the pod admitted all the same",
			admit:      clusterCritPod,
			pods:       []*v1.Pod{clusterCritPod, bestEffortPod, smallBurstable, largeBurstable, smallGuaranteed, largeGuaranteed},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, 550*mi)},
			killFails:  true,
			wantKilled: []string{"large-burstable", "large-guaranteed"},
		},
		{
			name:  "a non-critical pod keeps every reason",
			admit: nonCriticalAdmit, pods: []*v1.Pod{smallBurstable},
			reasons:     []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, mi), otherFailure},
			wantReasons: []string{"Insufficient memory", otherFailure.GetReason()},
		},
		{
			name:  "a critical pod failing for other reasons gets only those back",
			admit: clusterCritPod, pods: []*v1.Pod{clusterCritPod},
			reasons:     []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourcePods, 1), otherFailure},
			wantReasons: []string{otherFailure.GetReason()},
		},
		{
			name:  "a resize is left to the scheduler when the gate is on",
			admit: clusterCritPod, pods: []*v1.Pod{largeBurstable},
			reasons: []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, 100*mi)},
			op:      lifecycle.ResizeOperation, resizeGate: true,
			wantReasons: []string{"Insufficient memory"},
		},
		{
			name:  "a resize preempts when the gate is off",
			admit: clusterCritPod, pods: []*v1.Pod{largeBurstable},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceMemory, 100*mi)},
			op:         lifecycle.ResizeOperation,
			wantKilled: []string{"large-burstable"},
		},
		{
			name:    "no requirements: nothing to do",
			admit:   clusterCritPod,
			reasons: nil,
		},
		{
			name:    "no pods to preempt",
			admit:   clusterCritPod,
			reasons: []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourcePods, 1)},
			wantErr: true,
		},
		{
			name:  "a pod that exactly covers the need",
			admit: clusterCritPod, pods: []*v1.Pod{smallBurstable},
			reasons: []lifecycle.PredicateFailureReason{
				insufficientOf(v1.ResourceCPU, 100), insufficientOf(v1.ResourceMemory, 100*mi), insufficientOf(v1.ResourcePods, 1)},
			wantKilled: []string{"small-burstable"},
		},
		{
			name:  "a need larger than the pod",
			admit: clusterCritPod, pods: []*v1.Pod{smallBurstable},
			reasons: []lifecycle.PredicateFailureReason{
				insufficientOf(v1.ResourceCPU, 200), insufficientOf(v1.ResourceMemory, 200*mi), insufficientOf(v1.ResourcePods, 2)},
			wantErr: true,
		},
		{
			name:  "BestEffort goes before Burstable",
			admit: clusterCritPod, pods: []*v1.Pod{smallBurstable, bestEffortPod},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourcePods, 1)},
			wantKilled: []string{"best-effort"},
		},
		{
			name:  "Burstable goes before Guaranteed",
			admit: clusterCritPod, pods: []*v1.Pod{smallBurstable, smallGuaranteed},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourcePods, 1)},
			wantKilled: []string{"small-burstable"},
		},
		{
			name:  "the smaller Burstable pod when it is enough",
			admit: clusterCritPod, pods: []*v1.Pod{bestEffortPod, largeBurstable, smallBurstable},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 100), insufficientOf(v1.ResourceMemory, 100*mi)},
			wantKilled: []string{"small-burstable"},
		},
		{
			name:  "the larger Burstable pod when the smaller is not enough",
			admit: clusterCritPod, pods: []*v1.Pod{bestEffortPod, smallBurstable, largeBurstable},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 150), insufficientOf(v1.ResourceMemory, 150*mi)},
			wantKilled: []string{"large-burstable"},
		},
		{
			name:  "several pods when one is not enough",
			admit: clusterCritPod, pods: []*v1.Pod{bestEffortPod, smallBurstable, largeBurstable, smallGuaranteed, largeGuaranteed},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 350), insufficientOf(v1.ResourceMemory, 350*mi)},
			wantKilled: []string{"large-burstable", "small-burstable"},
		},
		{
			name:  "node-critical preempts cluster-critical",
			admit: nodeCritPod, pods: []*v1.Pod{clusterCritPod},
			reasons:    []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 100)},
			wantKilled: []string{"cluster-critical"},
		},
		{
			name:  "cluster-critical cannot preempt node-critical",
			admit: clusterCritPod, pods: []*v1.Pod{nodeCritPod},
			reasons: []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 100)},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.InPlacePodVerticalScalingSchedulerPreemption, tc.resizeGate)
			var killed []string
			rec := record.NewFakeRecorder(100)
			h := newHandler(
				func() []*v1.Pod { return tc.pods },
				func(pod *v1.Pod, evicted bool, grace *int64, fn func(*v1.PodStatus)) error {
					killed = append(killed, pod.Name)
					if tc.killFails {
						return errors.New("kill failed")
					}
					return nil
				}, rec, settings.Upstream())
			op := tc.op
			if op == "" {
				op = lifecycle.AddOperation
			}
			logs := &logCapture{}
			before := preemptionsByLabel(t)
			reasons, err := h.HandleAdmissionFailure(klog.NewContext(context.Background(), logs.logger()), tc.admit, tc.reasons, op)
			preempted := grown(before, preemptionsByLabel(t))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if err != nil && len(killed) > 0 {
				t.Fatalf("refused admission but killed %v", killed)
			}
			if !equalStrings(killed, tc.wantKilled) {
				t.Errorf("killed %v, want %v", killed, tc.wantKilled)
			}
			var got []string
			for _, r := range reasons {
				got = append(got, r.GetReason())
			}
			if !equalStrings(got, tc.wantReasons) {
				t.Errorf("reasons %v, want %v", got, tc.wantReasons)
			}
			// The stock kubelet's lines and counter: a failed kill is logged
			// as an error and not counted; each other victim is logged as
			// evicted and counted under the first shortfall.
			var failedLines, evictedLines int
			for _, l := range logs.lines() {
				switch {
				case strings.HasPrefix(l, "error Failed to evict pod err=kill failed "):
					failedLines++
				case strings.HasPrefix(l, "info V0 Pod evicted successfully "):
					evictedLines++
				}
			}
			wantFailed, wantEvicted := 0, len(tc.wantKilled)
			if tc.killFails {
				wantFailed, wantEvicted = len(tc.wantKilled), 0
			}
			if failedLines != wantFailed || evictedLines != wantEvicted {
				t.Errorf("%d \"Failed to evict pod\" and %d \"Pod evicted successfully\" lines, want %d and %d:\n%s",
					failedLines, evictedLines, wantFailed, wantEvicted, strings.Join(logs.lines(), "\n"))
			}
			wantPreempted := map[string]float64{}
			if wantEvicted > 0 {
				wantPreempted[string(tc.reasons[0].(*lifecycle.InsufficientResourceError).ResourceName)] = float64(wantEvicted)
			}
			if !reflect.DeepEqual(preempted, wantPreempted) {
				t.Errorf("kubelet_preemptions grew by %v, want %v", preempted, wantPreempted)
			}
			close(rec.Events)
			var victimEvents, preemptorEvents int
			for e := range rec.Events {
				if strings.HasPrefix(e, "Warning Preempting ") {
					victimEvents++
				} else {
					preemptorEvents++
				}
			}
			if victimEvents != len(tc.wantKilled) {
				t.Errorf("%d victim events, want one per victim (%d)", victimEvents, len(tc.wantKilled))
			}
			if reached := tc.wantKilled != nil || tc.wantErr; reached != (preemptorEvents == 1) || preemptorEvents > 1 {
				t.Errorf("%d events on the critical pod; want one exactly when preemption was attempted", preemptorEvents)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The near-tie node on which a fused multiply-add changes victims (see the
// victims package): the stock handler and critlet's both take pods 0, 2, 3
// and 4, on every architecture CI runs this on.
func TestNearTieNodeMatchesStock(t *testing.T) {
	pods := []*v1.Pod{
		castPod("pod-0", "250m", "320Mi", false, nil),
		castPod("pod-1", "450m", "256Mi", false, nil),
		castPod("pod-2", "300m", "384Mi", false, nil),
		castPod("pod-3", "550m", "192Mi", false, nil),
		castPod("pod-4", "250m", "384Mi", false, nil),
		castPod("pod-5", "550m", "128Mi", true, nil),
	}
	reasons := []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 500), insufficientOf(v1.ResourceMemory, 1280*mi)}
	want := run(t, stockHandler, clusterCritPod, pods, reasons, lifecycle.AddOperation, nil)
	var names []string
	for _, k := range want.kills {
		names = append(names, strings.TrimPrefix(k.uid, "uid-"))
	}
	slices.Sort(names)
	if got := strings.Join(names, ","); got != "pod-0,pod-2,pod-3,pod-4" {
		t.Fatalf("stock handler killed %s, want pod-0,pod-2,pod-3,pod-4", got)
	}
	// Also with the kills of pod-2 and pod-4 failing: the stock kubelet
	// logs them, counts only the others and admits all the same.
	failing := func(p *v1.Pod) bool { return p.Name == "pod-2" || p.Name == "pod-4" }
	wantFailing := run(t, stockHandler, clusterCritPod, pods, reasons, lifecycle.AddOperation, failing)
	for _, o := range []settings.Settings{settings.Upstream(), settings.Defaults()} {
		if err := compare(want, run(t, critletHandler(o), clusterCritPod, pods, reasons, lifecycle.AddOperation, nil), o.Parallelism == 1); err != nil {
			t.Errorf("%v:\n%v", o, err)
		}
		if err := compare(wantFailing, run(t, critletHandler(o), clusterCritPod, pods, reasons, lifecycle.AddOperation, failing), o.Parallelism == 1); err != nil {
			t.Errorf("%v, failing kills:\n%v", o, err)
		}
	}
}

// With the device preemption's held devices, a pod is weighed by the
// devices it holds: the pod whose request matches the shortfall but holds
// no usable device is passed over for one that does.
func TestHandleDeviceShortfallWeighsHeldDevices(t *testing.T) {
	const gpu = v1.ResourceName("example.com/gpu")
	stale, holder := withOneOf(gpu, smallBurstable), withOneOf(gpu, largeBurstable)
	pods := []*v1.Pod{stale, holder}
	critical := withOneOf(gpu, clusterCritPod)
	reasons := []lifecycle.PredicateFailureReason{insufficientOf(gpu, 1)}
	heldByHolder := func(p *v1.Pod, r v1.ResourceName) (int64, bool) {
		if r != gpu {
			return 0, false
		}
		if p.UID == holder.UID {
			return 1, true
		}
		return 0, true
	}
	for _, c := range []struct {
		name string
		held func(*v1.Pod, v1.ResourceName) (int64, bool)
		want []string
	}{
		// Upstream's rule: the smaller pod is as close to the shortfall.
		{"requests", nil, []string{stale.Name}},
		{"held devices", heldByHolder, []string{holder.Name}},
	} {
		k := &recordingKill{}
		h := newHandler(func() []*v1.Pod { return pods }, k.kill, record.NewFakeRecorder(10), settings.Upstream())
		if _, freed := preemptForDevices(t, h, critical, reasons, c.held, nil); !freed {
			t.Fatalf("%s: the victims did not free the shortfall", c.name)
		}
		if got := k.names(); !slices.Equal(got, c.want) {
			t.Errorf("weighed by %s: killed %v, want %v", c.name, got, c.want)
		}
	}
}

const nic = v1.ResourceName("example.com/nic")

// gpuNicShortfall is a critical pod short of one gpu and one nic.
var gpuNicShortfall = []lifecycle.PredicateFailureReason{insufficientOf(gpu, 1), insufficientOf(nic, 1)}

// gpuNicHolder is a pod requesting gpus and nics: Burstable (100m, 64Mi)
// when qos, BestEffort otherwise.
func gpuNicHolder(name string, qos bool, gpus, nics int64) *v1.Pod {
	p := castPod(name, "", "", false, nil)
	if qos {
		p = castPod(name, "100m", "64Mi", false, nil)
	}
	if p.Spec.Containers[0].Resources.Requests == nil {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{}
	}
	p.Spec.Containers[0].Resources.Requests[gpu] = *resource.NewQuantity(gpus, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Requests[nic] = *resource.NewQuantity(nics, resource.DecimalSI)
	return p
}

// For a device shortfall, a full tie is broken for the fewest victims:
// both Burstable pods free the gpu the BestEffort pod cannot, and the
// stock kubelet takes the later one, whose nic the BestEffort pod must
// then free too; the earlier one frees both alone.
func TestHandleDeviceShortfallBreaksTiesForFewestVictims(t *testing.T) {
	pods := []*v1.Pod{gpuNicHolder("both", true, 2, 2), gpuNicHolder("nic-only", false, 0, 1), gpuNicHolder("gpus-only", true, 3, 0)}
	reasons := gpuNicShortfall
	byRequest := func(*v1.Pod, v1.ResourceName) (int64, bool) { return 0, false }
	run := func(device bool) []string {
		k := &recordingKill{}
		h := newHandler(func() []*v1.Pod { return pods }, k.kill, record.NewFakeRecorder(10), settings.Upstream())
		if device {
			preemptForDevices(t, h, clusterCritPod, reasons, byRequest, nil)
			return k.names()
		}
		if _, err := h.HandleAdmissionFailure(context.Background(), clusterCritPod, reasons, lifecycle.AddOperation); err != nil {
			t.Fatal(err)
		}
		return k.names()
	}
	if got := run(false); !slices.Equal(got, []string{"gpus-only", "nic-only"}) {
		t.Fatalf("the stock rule killed %v, want [gpus-only nic-only]: the case no longer ties", got)
	}
	if got := run(true); !slices.Equal(got, []string{"both"}) {
		t.Errorf("for a device shortfall killed %v, want [both] alone", got)
	}
}

// A re-planned round of a device preemption breaks ties as its first round
// does: for the fewest victims. The first round takes the BestEffort pod
// that covers the shortfall alone; its kill fails, and the re-plan meets
// the tie of TestHandleDeviceShortfallBreaksTiesForFewestVictims, where
// upstream's rule takes two pods and one would do.
func TestDeviceShortfallReplanBreaksTiesForFewestVictims(t *testing.T) {
	pods := []*v1.Pod{gpuNicHolder("stuck", false, 1, 1), gpuNicHolder("both", true, 2, 2), gpuNicHolder("nic-only", false, 0, 1), gpuNicHolder("gpus-only", true, 3, 0)}
	reasons := gpuNicShortfall
	byRequest := func(*v1.Pod, v1.ResourceName) (int64, bool) { return 0, false }
	k := &recordingKill{also: func(p *v1.Pod) error {
		if p.Name == "stuck" {
			return errors.New("did not stop")
		}
		return nil
	}}
	opts := settings.Upstream()
	opts.MaxReplans = 1
	h := newHandler(func() []*v1.Pod { return pods }, k.kill, record.NewFakeRecorder(10), opts)
	if n, freed := preemptForDevices(t, h, clusterCritPod, reasons, byRequest, nil); n != 1 || !freed {
		t.Errorf("first round of %d victims, freed %v; want [stuck] alone, then a re-plan that frees the shortfall", n, freed)
	}
	if got := k.names(); !slices.Equal(got, []string{"both", "stuck"}) {
		t.Errorf("killed %v, want [both stuck]: the failed kill, then one pod", got)
	}
}

// preemptForDevices runs h.PreemptForDevices and waits for its kills to
// end; it returns how many victims were chosen and whether they freed the
// shortfall. exclude nil excludes no pod.
func preemptForDevices(t *testing.T, h *CriticalPodAdmissionHandler, pod *v1.Pod, reasons []lifecycle.PredicateFailureReason, held planning.HeldDevices, exclude func(k8stypes.UID) bool) (int, bool) {
	t.Helper()
	if exclude == nil {
		exclude = func(k8stypes.UID) bool { return false }
	}
	ended := make(chan bool, 1)
	n, left, err := h.PreemptForDevices(context.Background(), pod, reasons, held, exclude, func(freed bool, _ []k8stypes.UID) { ended <- freed })
	if err != nil || len(left) != 0 {
		t.Fatalf("left %v, err %v", left, err)
	}
	select {
	case freed := <-ended:
		return n, freed
	case <-time.After(time.Minute):
		t.Fatal("the kills never ended")
		return n, false
	}
}

// The victims are chosen before PreemptForDevices returns, and killed
// after: it returns while a kill is still under way, and done reports the
// end. A pod excluded (a victim stuck terminating) is not chosen again;
// the critical pod's event says its admission follows.
func TestPreemptForDevicesKillsWithoutWaiting(t *testing.T) {
	const gpu = v1.ResourceName("example.com/gpu")
	stuck, holder := withOneOf(gpu, smallBurstable), withOneOf(gpu, largeBurstable)
	release, started := make(chan struct{}), make(chan struct{}, 1)
	k := &recordingKill{also: func(*v1.Pod) error { started <- struct{}{}; <-release; return nil }}
	events := record.NewFakeRecorder(10)
	h := newHandler(func() []*v1.Pod { return []*v1.Pod{stuck, holder} }, k.kill, events, settings.Upstream())
	ended := make(chan bool, 1)
	exclude := func(uid k8stypes.UID) bool { return uid == stuck.UID }
	n, left, err := h.PreemptForDevices(context.Background(), withOneOf(gpu, clusterCritPod), []lifecycle.PredicateFailureReason{insufficientOf(gpu, 1)}, nil, exclude,
		func(freed bool, _ []k8stypes.UID) { ended <- freed })
	if err != nil || len(left) != 0 || n != 1 {
		t.Fatalf("chose %d victims, left %v, err %v; want one", n, left, err)
	}
	<-started
	select {
	case <-ended:
		t.Fatal("done was called before the kill ended")
	default:
	}
	close(release)
	select {
	case freed := <-ended:
		if !freed {
			t.Error("done reports the shortfall not freed")
		}
	case <-time.After(time.Minute):
		t.Fatal("the kill ended, done was never called")
	}
	if got := k.names(); !slices.Equal(got, []string{holder.Name}) {
		t.Errorf("killed %v, want only %s: %s is excluded", got, holder.Name, stuck.Name)
	}
	var last string
	for len(events.Events) > 0 {
		last = <-events.Events
	}
	if !strings.Contains(last, reasonPreempted) || !strings.HasSuffix(last, "; admission follows") {
		t.Errorf("last event %q, want %s saying admission follows", last, reasonPreempted)
	}
	// With every holder excluded, nothing is chosen: refused.
	if _, _, err := h.PreemptForDevices(context.Background(), withOneOf(gpu, clusterCritPod), []lifecycle.PredicateFailureReason{insufficientOf(gpu, 1)}, nil,
		func(k8stypes.UID) bool { return true }, func(bool, []k8stypes.UID) { t.Error("done called for a refusal") }); err == nil {
		t.Error("every holder excluded: not refused")
	}
}

// done reports whether the victims that terminated freed the shortfall,
// and which kills failed: a victim whose kill fails (no re-planning)
// leaves it short.
func TestPreemptForDevicesReportsAFailedKill(t *testing.T) {
	const gpu = v1.ResourceName("example.com/gpu")
	a, b := withOneOf(gpu, smallBurstable), withOneOf(gpu, largeBurstable)
	reasons := []lifecycle.PredicateFailureReason{insufficientOf(gpu, 2)}
	for _, c := range []struct {
		name   string
		fail   *v1.Pod
		freed  bool
		failed []k8stypes.UID
	}{{"both stop", nil, true, nil}, {"one fails", a, false, []k8stypes.UID{a.UID}}} {
		k := &recordingKill{also: func(p *v1.Pod) error {
			if c.fail != nil && p.Name == c.fail.Name {
				return errors.New("timeout waiting to kill pod")
			}
			return nil
		}}
		h := newHandler(func() []*v1.Pod { return []*v1.Pod{a, b} }, k.kill, record.NewFakeRecorder(10), settings.Upstream())
		type result struct {
			freed  bool
			failed []k8stypes.UID
		}
		ended := make(chan result, 1)
		n, _, err := h.PreemptForDevices(context.Background(), withOneOf(gpu, clusterCritPod), reasons, nil, func(k8stypes.UID) bool { return false },
			func(freed bool, failed []k8stypes.UID) { ended <- result{freed, failed} })
		if err != nil || n != 2 {
			t.Fatalf("%s: %d victims, err %v; want 2", c.name, n, err)
		}
		select {
		case got := <-ended:
			if got.freed != c.freed || !slices.Equal(got.failed, c.failed) {
				t.Errorf("%s: done(%v, %v), want done(%v, %v)", c.name, got.freed, got.failed, c.freed, c.failed)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: done never called", c.name)
		}
	}
}

// A pod the kubelet holds unadmitted (critlet's device patches) is active
// but holds nothing: it is never a victim, on either path.
func TestHeldPodsAreNoVictims(t *testing.T) {
	defer kubeletstate.SetHeld(kubeletstate.Get().Held)
	held := smallBurstable.DeepCopy()
	held.Name, held.UID = "held", "uid-held"
	pods := []*v1.Pod{held, largeBurstable}
	reasons := []lifecycle.PredicateFailureReason{insufficientOf(v1.ResourceCPU, 100)}
	for _, c := range []struct {
		name   string
		isHeld func(k8stypes.UID) bool
		want   []string
	}{
		{"none held", func(k8stypes.UID) bool { return false }, []string{held.Name}},
		{"one held", func(uid k8stypes.UID) bool { return uid == held.UID }, []string{largeBurstable.Name}},
	} {
		kubeletstate.SetHeld(c.isHeld)
		k := &recordingKill{}
		h := newHandler(func() []*v1.Pod { return pods }, k.kill, record.NewFakeRecorder(10), settings.Upstream())
		if _, err := h.HandleAdmissionFailure(context.Background(), clusterCritPod, reasons, lifecycle.AddOperation); err != nil {
			t.Fatal(err)
		}
		if got := k.names(); !slices.Equal(got, c.want) {
			t.Errorf("%s: killed %v, want %v", c.name, got, c.want)
		}
		k = &recordingKill{}
		h = newHandler(func() []*v1.Pod { return pods }, k.kill, record.NewFakeRecorder(10), settings.Upstream())
		preemptForDevices(t, h, clusterCritPod, reasons, nil, nil)
		if got := k.names(); !slices.Equal(got, c.want) {
			t.Errorf("%s, device path: killed %v, want %v", c.name, got, c.want)
		}
	}
}

// withOneOf is a copy of p requesting one of name in its first container.
func withOneOf(name v1.ResourceName, p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	p.Spec.Containers[0].Resources.Requests[name] = resource.MustParse("1")
	return p
}
