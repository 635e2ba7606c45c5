//go:build critlet_patch

package kubelet

// critlet's device-readmission patch (pkg/patched): after a kubelet restart
// or a node reboot the kubelet admits its pods before the device plugins
// have registered again, and the device manager refuses every pod needing
// their devices ("cannot allocate unregistered device", "no healthy
// devices present"); the stock kubelet fails them for good
// (kubernetes#117955, #125579, #133382). With the setting on, such a pod,
// refused within the window after the kubelet starts, is held: neither
// rejected nor handed to the pod workers, it is admitted again once its
// plugins are back, through every admit handler, and refused with its last
// reason when the window closes. Package devicewait decides; this file
// reads the device manager and the pod manager and acts.
//
// Hooks reach this file from HandlePodAdditions before it rejects a pod,
// from housekeeping (every two seconds once all pod sources are ready)
// before it cleans up and where it counts the active pods, all on the sync
// loop's goroutine, so a retry never races an admission; and from the pod
// workers' UpdatePod, on whichever goroutine updates a pod. With the
// setting off they return at once and nothing else here runs.
//
// A held pod is in the pod manager but has no allocation (one checkpointed
// before a reboot is removed) and no pod worker. Every path that would
// start or sync it meets in UpdatePod: its mirror pod added or removed,
// housekeeping's restart of active pods the workers do not know, a sync
// (the container manager names it when its checkpointed devices change
// health), an update. There the guard drops any update but a kill, so no
// held pod is started unadmitted whatever dispatches it. The kubelet
// itself passes over unallocated pods' API updates (with
// InPlacePodVerticalScaling, on by default, the only way the patch is
// tested; without it pods are not held). Housekeeping does not count a held pod active, and every
// housekeeping refuses a held pod deleted meanwhile, so its deletion
// completes at once. It stays active for the device manager, which keeps
// its checkpointed devices.
//
// The critical-device-preemption patch holds its critical pods here too,
// while their victims terminate (cm.CritletReasonPreemptingForDevices),
// with or without this patch's setting: the same guard, housekeeping and
// deletion, no window.

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/devicewait"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/readmission"
)

// Event reasons on a held pod.
const (
	critletReasonWaitingForDevicePlugin  = "WaitingForDevicePlugin"
	critletReasonAdmittedAfterPlugin     = "AdmittedAfterDevicePlugin"
	critletReasonWaitingForPreemptedPods = "WaitingForPreemptedPods"
	critletReasonAdmittedAfterPreemption = "AdmittedAfterPreemption"
)

// The holds are read by the pod workers' guard on whichever goroutine
// updates a pod, and changed on the sync loop's: critletDeviceHoldsMu
// guards the pointer and what it points to.
var (
	critletDeviceHoldsMu sync.Mutex
	critletDeviceHolds   *critletHolds
)

// critletHolds is devicewait.Holds with each call under
// critletDeviceHoldsMu (none calls out, so none can deadlock). Each method
// locks and calls straight through: the build's machine-code proof follows
// direct calls only.
type critletHolds struct{ h *devicewait.Holds }

func (c *critletHolds) Hold(uid types.UID, waiting []string, reason, message string, now time.Time) bool {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.Hold(uid, waiting, reason, message, now)
}

func (c *critletHolds) HoldPreempting(uid types.UID, reason, message string, now time.Time) {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	c.h.HoldPreempting(uid, reason, message, now)
}

func (c *critletHolds) Next(now time.Time, healthy map[string]int64) (retry, refuse []devicewait.Held) {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.Next(now, healthy)
}

func (c *critletHolds) All() []devicewait.Held {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.All()
}

func (c *critletHolds) Forget(uid types.UID) {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	c.h.Forget(uid)
}

func (c *critletHolds) Has(uid types.UID) bool {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.Has(uid)
}

func (c *critletHolds) Len() int {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.Len()
}

func (c *critletHolds) Closes() time.Time {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return c.h.Closes()
}

// The admission handler reads the holds through kubeletstate: a held pod
// is active but holds nothing, so it is no victim.
func init() { kubeletstate.SetHeld(critletIsHeld) }

// critletIsHeld reports whether pod uid is held, on any goroutine.
func critletIsHeld(uid types.UID) bool {
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	return critletDeviceHolds != nil && critletDeviceHolds.h.Has(uid)
}

// critletHeldForDevices returns the pods held for device plugins
// (device-readmission) or for their victims to terminate
// (critical-device-preemption), or nil when both patches are off. The
// device plugins' window opens at the first call, when the sync loop
// first admits pods or does housekeeping, moments after the kubelet
// starts; without device-readmission it is closed.
func (kl *Kubelet) critletHeldForDevices() *critletHolds {
	s := kubeletstate.Get().Settings
	if !s.On(patched.DeviceReadmission) && !s.On(patched.CriticalDevicePreemption) ||
		!utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScaling) {
		return nil
	}
	critletDeviceHoldsMu.Lock()
	defer critletDeviceHoldsMu.Unlock()
	if critletDeviceHolds == nil {
		var window time.Duration
		if s.On(patched.DeviceReadmission) {
			window = s.DeviceReadmissionWindow
		}
		critletDeviceHolds = &critletHolds{devicewait.New(kl.clock.Now(), window, readmission.DefaultBackoff)}
	}
	return critletDeviceHolds
}

// critletPassOverHeld is the pod workers' guard, called by UpdatePod
// before it takes the update: it reports whether the update of pod uid is
// to be dropped, the pod being held and never admitted. A kill is taken:
// the pod workers end a pod that never started, and a held pod deleted,
// its static pod's file removed, or evicted must end. So is a create for a
// pod whose worker was asked to terminate (a static pod's file removed and
// restored): the worker only notes it is to be started again, and
// housekeeping then removes the worker, so admission finds none.
func critletPassOverHeld(p *podWorkers, logger klog.Logger, uid types.UID, update kubetypes.SyncPodType) bool {
	if update == kubetypes.SyncPodKill {
		return false
	}
	// With the setting off there are no holds: nothing more is read.
	critletDeviceHoldsMu.Lock()
	held := critletDeviceHolds != nil && critletDeviceHolds.h.Has(uid)
	critletDeviceHoldsMu.Unlock()
	held = held && !(update == kubetypes.SyncPodCreate && p.IsPodTerminationRequested(uid))
	if held {
		logger.V(3).Info("Pod update passed over: the pod is held for device plugins and has not been admitted")
	}
	return held
}

// critletHoldForDevices is called by HandlePodAdditions when admission has
// refused pod, before it rejects it. It reports whether the pod is held:
// refused by the device manager for a plugin that is away (unregistered, or
// no healthy device), within the window, when it waits for the resource
// the refusal names (critletAwayPlugins; under a topology policy, the
// resources it requests with no healthy device); or refused while pods preempted for devices
// terminate, when it waits for them.
func (kl *Kubelet) critletHoldForDevices(ctx context.Context, pod *v1.Pod, reason, message string) bool {
	h := kl.critletHeldForDevices()
	if h == nil {
		return false
	}
	logger := klog.FromContext(ctx)
	if reason == cm.CritletReasonPreemptingForDevices {
		first := !h.Has(pod.UID)
		h.HoldPreempting(pod.UID, reason, message, kl.clock.Now())
		// As for a plugin's hold: a held pod has no allocation, even one
		// checkpointed before a reboot.
		kl.allocationManager.RemovePod(logger, pod.UID)
		if first {
			kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeNormal, critletReasonWaitingForPreemptedPods, "Admission waits: %s", message)
			logger.Info("Critical pod held while the pods preempted for devices terminate", "pod", klog.KObj(pod), "podUID", pod.UID, "message", message)
		}
		return true
	}
	waiting := kl.critletAwayPlugins(logger, pod, reason, message)
	if len(waiting) == 0 || !h.Hold(pod.UID, waiting, reason, message, kl.clock.Now()) {
		return false
	}
	// A pod admitted before a reboot still has its allocation checkpointed;
	// held, it must look unadmitted everywhere (the kubelet passes over
	// unallocated pods' updates), and its admission allocates it again.
	kl.allocationManager.RemovePod(logger, pod.UID)
	critletmetrics.DeviceReadmissions.WithLabelValues("held").Inc()
	kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeWarning, critletReasonWaitingForDevicePlugin,
		"Admission waits until %s for the device plugins of %v: %s", h.Closes().UTC().Format("15:04:05"), waiting, message)
	logger.Info("Pod refused for device plugins that are not back yet; critlet holds it until they are or the window closes",
		"pod", klog.KObj(pod), "podUID", pod.UID, "waitingFor", waiting, "reason", reason, "message", message, "windowCloses", h.Closes())
	return true
}

// critletRetryHeldForDevices runs at the start of housekeeping: it admits
// again the held pods whose plugins are back, exactly as HandlePodAdditions
// takes a new pod, and rejects with their last reason those still held
// when the window closes, and those deleted meanwhile whether due or not
// (so that their deletion completes, as for any refused pod).
func (kl *Kubelet) critletRetryHeldForDevices(ctx context.Context) {
	h := kl.critletHeldForDevices()
	if h == nil || h.Len() == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	// Every held pod, due or not: one deleted is refused now so that its
	// deletion completes (the kubelet passes over its update).
	for _, held := range h.All() {
		pod, ok := kl.critletHeldPod(held.UID)
		switch {
		case !ok:
			h.Forget(held.UID)
			logger.V(2).Info("Held pod forgotten: it is gone or no longer pending", "podUID", held.UID)
		case pod.DeletionTimestamp != nil:
			h.Forget(pod.UID)
			logger.Info("Held pod deleted; refusing it so that its deletion completes", "pod", klog.KObj(pod), "podUID", pod.UID, "heldSince", held.Since)
			kl.critletRejectHeld(ctx, pod, held.Reason, held.Message)
			if !held.Preempting {
				critletmetrics.DeviceReadmissions.WithLabelValues("refused").Inc()
			}
		}
	}
	healthy := kl.critletHealthyDevices(logger)
	retry, refuse := h.Next(kl.clock.Now(), healthy)
	for _, held := range refuse {
		if pod, ok := kl.critletHeldPod(held.UID); ok {
			logger.Info("Device plugins not back when the window closed; refusing the held pod", "pod", klog.KObj(pod), "podUID", pod.UID,
				"waitingFor", held.Waiting, "reason", held.Reason, "heldSince", held.Since)
			kl.critletRejectHeld(ctx, pod, held.Reason, held.Message)
			critletmetrics.DeviceReadmissions.WithLabelValues("window_closed").Inc()
		}
	}
	for _, held := range retry {
		pod, ok := kl.critletHeldPod(held.UID)
		if !ok {
			h.Forget(held.UID)
			logger.V(2).Info("Held pod forgotten: it is gone or no longer pending", "podUID", held.UID)
			continue
		}
		if kl.podWorkers.IsPodTerminationRequested(pod.UID) {
			// Its old worker, ended by a kill, is removed by housekeeping
			// first: a pod admitted beside it would count as inactive,
			// and the resource managers could free what it was allocated.
			continue
		}
		start := kl.clock.Now()
		ok, reason, message := kl.allocationManager.AddPod(ctx, kl.GetActivePods(), pod)
		if !ok {
			// Still waiting for preempted pods; or refused for a plugin
			// away again, or for another one it needs: held for the one
			// named, tried again after its backoff once that has healthy
			// devices.
			if reason == cm.CritletReasonPreemptingForDevices {
				h.HoldPreempting(pod.UID, reason, message, start)
				kl.allocationManager.RemovePod(logger, pod.UID)
				if !held.Preempting {
					// Its plugin is back, and its devices are held by
					// pods preempted for it or for another.
					kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeNormal, critletReasonWaitingForPreemptedPods, "Admission waits: %s", message)
				}
				continue
			}
			if away := kl.critletAwayPlugins(logger, pod, reason, message); len(away) > 0 && h.Hold(pod.UID, away, reason, message, start) {
				critletmetrics.DeviceReadmissions.WithLabelValues("held").Inc()
				logger.Info("Held pod refused again for device plugins; it stays held", "pod", klog.KObj(pod), "podUID", pod.UID, "message", message)
				continue
			}
			h.Forget(pod.UID)
			kl.critletRejectHeld(ctx, pod, reason, message)
			if !held.Preempting {
				critletmetrics.DeviceReadmissions.WithLabelValues("refused").Inc()
			}
			continue
		}
		h.Forget(pod.UID)
		_, mirrorPod, _ := kl.podManager.GetPodAndMirrorPod(pod)
		if held.Preempting {
			kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeNormal, critletReasonAdmittedAfterPreemption,
				"Admitted once the pods preempted for devices had terminated (held since %s)", held.Since.UTC().Format("15:04:05"))
			logger.Info("Held pod admitted: the pods preempted for devices have terminated", "pod", klog.KObj(pod), "podUID", pod.UID,
				"heldSince", held.Since, "retries", held.Retries)
		} else {
			critletmetrics.DeviceReadmissions.WithLabelValues("admitted").Inc()
			kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeNormal, critletReasonAdmittedAfterPlugin,
				"Admitted once the device plugins of %v were back (held since %s)", held.Waiting, held.Since.UTC().Format("15:04:05"))
			logger.Info("Held pod admitted: its device plugins are back", "pod", klog.KObj(pod), "podUID", pod.UID,
				"waitedFor", held.Waiting, "heldSince", held.Since, "retries", held.Retries)
		}
		kl.critletStartAdmitted(ctx, pod, mirrorPod, start)
	}
}

// critletAwaitsAdmission reports whether pod uid is still to be admitted
// again by critlet: held here, or a static pod static-pod-readmission
// queued. A device preemption's devices are kept for its pod while it is.
// Called on the sync loop, from the allocate handler.
func (kl *Kubelet) critletAwaitsAdmission(uid types.UID) bool {
	if h := kl.critletHeldForDevices(); h != nil && h.Has(uid) {
		return true
	}
	q := critletReadmission()
	return q != nil && q.Has(uid)
}

// critletNotHeldForDevices returns active less the pods held.
func (kl *Kubelet) critletNotHeldForDevices(active []*v1.Pod) []*v1.Pod {
	h := kl.critletHeldForDevices()
	if h == nil || h.Len() == 0 {
		return active
	}
	return slices.DeleteFunc(slices.Clone(active), func(p *v1.Pod) bool { return h.Has(p.UID) })
}

// critletRejectHeld refuses a held pod as HandlePodAdditions refuses one,
// static-pod-readmission's retry included.
func (kl *Kubelet) critletRejectHeld(ctx context.Context, pod *v1.Pod, reason, message string) {
	kl.rejectPod(ctx, pod, reason, message)
	recordAdmissionRejection(reason)
	kl.critletAdmissionRefused(ctx, pod, reason)
}

// critletHeldPod returns the pod of a held UID while it is still the pod
// that was held: in the pod manager, never admitted, not terminal. A pod
// worker that ended it (a kill the guard let through: its static pod's
// file removed and restored, its old containers cleaned up as orphans)
// does not end the hold: once admitted, the pod workers start it again.
func (kl *Kubelet) critletHeldPod(uid types.UID) (*v1.Pod, bool) {
	pod, ok := kl.podManager.GetPodByUID(uid)
	if !ok || kl.allocationManager.HasPodAllocatedResources(uid) || kl.isAdmittedPodTerminal(pod) {
		return nil, false
	}
	return pod, true
}

// critletHealthyDevices counts the device manager's healthy devices per
// resource (its allocatable devices: a read without side effects). A
// device on several NUMA nodes is listed once per node: counted once.
func (kl *Kubelet) critletHealthyDevices(logger klog.Logger) map[string]int64 {
	ids := map[string]sets.Set[string]{}
	for _, d := range kl.containerManager.GetAllocatableDevices(logger) {
		if ids[d.ResourceName] == nil {
			ids[d.ResourceName] = sets.New[string]()
		}
		ids[d.ResourceName].Insert(d.DeviceIds...)
	}
	out := make(map[string]int64, len(ids))
	for r, s := range ids {
		out[r] = int64(s.Len())
	}
	return out
}
