package preemption

import (
	"context"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/planning"
	"github.com/critlet/critlet/pkg/settings"
)

// CriticalPodAdmissionHandler is a lifecycle.AdmissionFailureHandler. When a
// critical pod fails admission only for lack of resources, it preempts pods
// whose requests cover the shortfall and lets the critical pod in.
type CriticalPodAdmissionHandler struct {
	getPodsFunc eviction.ActivePodsFunc
	killPodFunc eviction.KillPodFunc
	recorder    record.EventRecorder
	opts        settings.Settings
	// eventWait bounds how long a victim's Preempting event is sent for
	// (preempting_event.go); sending counts those being sent.
	eventWait time.Duration
	sending   sync.WaitGroup
}

var _ lifecycle.AdmissionFailureHandler = &CriticalPodAdmissionHandler{}

// NewCriticalPodAdmissionHandler returns a handler that lists candidate pods
// with getPodsFunc, preempts them with killPodFunc and records events with
// recorder, under the settings the kubelet main published in kubeletstate.
func NewCriticalPodAdmissionHandler(getPodsFunc eviction.ActivePodsFunc, killPodFunc eviction.KillPodFunc, recorder record.EventRecorder) *CriticalPodAdmissionHandler {
	opts := kubeletstate.Get().Settings
	if err := opts.Validate(); err != nil {
		// Settings are validated when parsed; this is a safety net only.
		klog.Background().Error(err, "Invalid critical-pod admission settings, using the defaults")
		opts = settings.Defaults()
	}
	critletmetrics.Register()
	// The kubelet's one settings line: every patch built in, those on, and
	// the settings as flags. NewMainKubelet builds this handler once, at
	// start-up.
	klog.Background().Info("critlet critical-pod admission handler installed",
		"patches", strings.Join(patchNames(), ","), "on", strings.Join(opts.PatchesOn(), ","), "settings", opts.String())
	return newHandler(getPodsFunc, killPodFunc, recorder, opts)
}

func patchNames() []string {
	names := make([]string, len(patched.Patches))
	for i, p := range patched.Patches {
		names[i] = p.Name
	}
	return names
}

func newHandler(getPodsFunc eviction.ActivePodsFunc, killPodFunc eviction.KillPodFunc, recorder record.EventRecorder, opts settings.Settings) *CriticalPodAdmissionHandler {
	return &CriticalPodAdmissionHandler{getPodsFunc: getPodsFunc, killPodFunc: killPodFunc, recorder: recorder, opts: opts, eventWait: eventSendWait}
}

// HandleAdmissionFailure is called with the reasons admitPod was refused.
// For a critical pod refused only for insufficient resources it preempts
// pods and returns no reasons, so the pod is admitted; otherwise it returns
// the reasons that still stand.
func (c *CriticalPodAdmissionHandler) HandleAdmissionFailure(ctx context.Context, admitPod *v1.Pod, failureReasons []lifecycle.PredicateFailureReason, operation lifecycle.Operation) ([]lifecycle.PredicateFailureReason, error) {
	if !kubetypes.IsCriticalPod(admitPod) {
		return failureReasons, nil
	}
	start := time.Now()
	// With this gate the scheduler owns preemption for in-place resizes; the
	// kubelet defers the resize instead of preempting.
	if operation == lifecycle.ResizeOperation && utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScalingSchedulerPreemption) {
		return failureReasons, nil
	}
	reqs, other := planning.Shortfall(failureReasons)
	if len(other) > 0 {
		// Only resource shortfalls can be fixed by preemption; report the rest.
		return other, nil
	}
	return nil, c.admit(ctx, start, admitPod, reqs, nil)
}

// PreemptForDevices is HandleAdmissionFailure for the
// critical-device-preemption patch, whose reasons include the device
// manager's shortfall, without the wait: it chooses the victims on the
// caller's goroutine (the sync loop) and returns how many, or the reasons
// that still stand and the refusal when no set of pods covers them; the
// kills, and the re-planned rounds for kills that fail, run on their own
// goroutine, which calls done once every round has ended, with whether
// the victims terminated cover the shortfall and the victims whose kills
// failed. Meanwhile the kubelet holds the critical pod. Each pod is
// credited with the devices held counts for it, not its request, for the
// resources held counts; a pod exclude reports (an earlier victim still
// stuck terminating) is no candidate.
func (c *CriticalPodAdmissionHandler) PreemptForDevices(ctx context.Context, admitPod *v1.Pod, failureReasons []lifecycle.PredicateFailureReason, held planning.HeldDevices,
	exclude func(types.UID) bool, done func(freed bool, failed []types.UID)) (int, []lifecycle.PredicateFailureReason, error) {
	if !kubetypes.IsCriticalPod(admitPod) {
		return 0, failureReasons, nil
	}
	start := time.Now()
	reqs, other := planning.Shortfall(failureReasons)
	if len(other) > 0 {
		return 0, other, nil
	}
	var pods []*v1.Pod
	for _, p := range c.getPodsFunc() {
		if !exclude(p.UID) {
			pods = append(pods, p)
		}
	}
	a, plan, err := c.plan(ctx, admitPod, pods, reqs, held)
	if err != nil {
		return 0, nil, err
	}
	a.held = true
	go func() {
		freed := a.run(ctx, start, plan)
		failed := make([]types.UID, len(a.failed))
		for i, f := range a.failed {
			failed[i] = f.pod.UID
		}
		done(freed, failed)
	}()
	return len(plan), nil, nil
}

// refuse records why admitPod cannot be admitted and returns the error the
// kubelet puts in the pod's status, worded as the stock kubelet's.
func (c *CriticalPodAdmissionHandler) refuse(admitPod *v1.Pod, err error) error {
	c.recorder.Eventf(admitPod, v1.EventTypeWarning, reasonPreemptionImpossible,
		"Preempting pods cannot make room (policy %s): %v", c.opts.Policy, err)
	return planning.Refusal(err)
}
