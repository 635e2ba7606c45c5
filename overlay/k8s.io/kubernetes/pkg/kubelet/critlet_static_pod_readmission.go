//go:build critlet_patch

package kubelet

// critlet's static-pod-readmission patch (pkg/patched): a static pod refused
// at admission is admitted again once it can be. The stock kubelet never
// retries it: its sources send nothing new while the manifest is unchanged,
// so the pod stays Failed until the kubelet restarts (kubernetes#116484).
//
// Two hooks reach this file, both on the sync loop's goroutine, so a retry
// never races an admission: HandlePodAdditions reports each refusal, and
// housekeeping (every two seconds, once all pod sources are ready) retries
// the refused pods that package readmission says are due. With the setting
// off both return at once and nothing else here runs.

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/allocation"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/readmission"
)

// critletReasonReadmitted is the event reason on a static pod admitted again.
const critletReasonReadmitted = "Readmitted"

var (
	critletReadmissionMu    sync.Mutex
	critletReadmissionQueue *readmission.Queue
)

// critletReadmission returns the queue of refused static pods, or nil when
// the patch is off in the settings the kubelet main published. The queue
// is made at the first call with the patch on.
func critletReadmission() *readmission.Queue {
	if !kubeletstate.Get().Settings.On(patched.StaticPodReadmission) {
		return nil
	}
	critletReadmissionMu.Lock()
	defer critletReadmissionMu.Unlock()
	if critletReadmissionQueue == nil {
		critletReadmissionQueue = readmission.NewQueue(readmission.DefaultBackoff)
	}
	return critletReadmissionQueue
}

// critletAdmissionRefused is called by HandlePodAdditions after it refused
// pod; it keeps static pods for a retry.
func (kl *Kubelet) critletAdmissionRefused(ctx context.Context, pod *v1.Pod, reason string) {
	q := critletReadmission()
	if q == nil || !kubetypes.IsStaticPod(pod) {
		return
	}
	n, next := q.Refused(pod.UID, reason, kl.clock.Now(), critletUIDs(kl.GetActivePods()))
	klog.FromContext(ctx).Info("Static pod refused at admission; critlet will admit it again when a pod leaves or its backoff expires",
		"pod", klog.KObj(pod), "podUID", pod.UID, "reason", reason, "refusals", n, "nextTry", next)
}

// critletRetryRefusedAdmissions runs at the end of housekeeping. Each due
// pod goes through the kubelet's admission exactly as HandlePodAdditions
// takes a new pod (the same admit handlers in the same order, so a critical
// pod may preempt); refused again, it is rejected again (event, status,
// metric) and waits longer; admitted, it takes upstream's steps after an
// admission (the pod-level resources metric, the allocation and pending
// resizes) and is handed to the pod workers as a new pod.
func (kl *Kubelet) critletRetryRefusedAdmissions(ctx context.Context) {
	q := critletReadmission()
	if q == nil || q.Len() == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	for _, at := range q.Due(kl.clock.Now(), critletUIDs(kl.GetActivePods())) {
		pod, mirrorPod, state := kl.critletRefusedPod(at.UID)
		switch state {
		case critletRetryGone:
			q.Forget(at.UID)
			logger.V(2).Info("Refused static pod forgotten: its manifest is gone or it is no longer refused", "podUID", at.UID)
			continue
		case critletRetryLater:
			logger.V(4).Info("Refused static pod waits for containers of the same UID to stop", "pod", klog.KObj(pod), "podUID", pod.UID)
			continue
		}
		start := kl.clock.Now()
		if ok, reason, message := kl.allocationManager.AddPod(ctx, kl.GetActivePods(), pod); !ok {
			if reason == cm.CritletReasonPreemptingForDevices {
				// Pods preempted for its devices are terminating: it stays
				// as refused before, and is due again once one has left.
				n, next := q.Refused(pod.UID, reason, start, critletUIDs(kl.GetActivePods()))
				logger.Info("Static pod waits for the pods preempted for its devices", "pod", klog.KObj(pod), "podUID", pod.UID, "message", message, "refusals", n, "nextTry", next)
				continue
			}
			kl.rejectPod(ctx, pod, reason, message)
			recordAdmissionRejection(reason)
			critletmetrics.ReadmissionAttempts.WithLabelValues("refused").Inc()
			n, next := q.Refused(pod.UID, reason, start, critletUIDs(kl.GetActivePods()))
			logger.Info("Static pod refused again", "pod", klog.KObj(pod), "podUID", pod.UID, "reason", reason, "refusals", n, "nextTry", next)
			continue
		}
		q.Forget(pod.UID)
		critletmetrics.ReadmissionAttempts.WithLabelValues("admitted").Inc()
		// The refusal left the pod Failed in the status manager, which would
		// hold the pod worker to that phase; a static pod's cached phase may
		// go back (the status manager does not lock static pods' phases), and
		// the mirror pod follows when its status is next synced.
		kl.statusManager.SetPodStatus(logger, pod, v1.PodStatus{Phase: v1.PodPending, QOSClass: v1qos.GetPodQOS(pod)})
		kl.recorder.WithLogger(logger).Eventf(pod, v1.EventTypeNormal, critletReasonReadmitted,
			"Admitted after %d refusals (last: %s)", at.Refusals, at.LastReason)
		logger.Info("Static pod admitted again", "pod", klog.KObj(pod), "podUID", pod.UID,
			"refusals", at.Refusals, "lastReason", at.LastReason, "podsLeft", at.PodsLeft)
		kl.critletStartAdmitted(ctx, pod, mirrorPod, start)
	}
}

// critletStartAdmitted takes the steps HandlePodAdditions takes after it
// admits a pod: the pod-level resources metric, the pod updated from its
// allocation, the pod handed to the pod workers as a new pod, and pending
// resizes. Re-admissions call it: they admit outside HandlePodAdditions.
func (kl *Kubelet) critletStartAdmitted(ctx context.Context, pod, mirrorPod *v1.Pod, start time.Time) {
	logger := klog.FromContext(ctx)
	recordPodLevelResourcesAdmission(pod)
	resizing := utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScaling)
	var pendingResize bool
	if resizing {
		_, pendingResize = kl.allocationManager.UpdatePodFromAllocation(pod)
	}
	kl.podWorkers.UpdatePod(ctx, UpdatePodOptions{
		Pod:        pod,
		MirrorPod:  mirrorPod,
		UpdateType: kubetypes.SyncPodCreate,
		StartTime:  start,
	})
	if resizing {
		kl.statusManager.BackfillPodResizeConditions([]*v1.Pod{pod})
		if pendingResize {
			kl.allocationManager.PushPendingResize(logger, pod.UID)
			kl.allocationManager.RetryPendingResizes(ctx, allocation.TriggerReasonPodsAdded)
		}
	}
}

type critletRetryState int

const (
	critletRetryNow critletRetryState = iota
	// critletRetryLater: containers a previous kubelet ran under the same
	// UID are being stopped (housekeeping stops a refused pod's leftovers);
	// admitting before they are gone would start the pod beside them.
	critletRetryLater
	// critletRetryGone: the manifest is gone (or changed, giving a new UID),
	// or the pod is no longer refused.
	critletRetryGone
)

// critletRefusedPod returns the static pod uid, its mirror pod, and whether
// it may be tried now. Once leftovers of the same UID have stopped, the pod
// workers hold it as terminated: admitted, the create update asks them to
// restart it, and housekeeping starts it, as for any static pod whose UID
// comes back.
func (kl *Kubelet) critletRefusedPod(uid types.UID) (*v1.Pod, *v1.Pod, critletRetryState) {
	pod, ok := kl.podManager.GetPodByUID(uid)
	if !ok || !kubetypes.IsStaticPod(pod) {
		return nil, nil, critletRetryGone
	}
	if status, ok := kl.statusManager.GetPodStatus(uid); !ok || status.Phase != v1.PodFailed {
		return nil, nil, critletRetryGone
	}
	if kl.podWorkers.IsPodTerminationRequested(uid) && !kl.podWorkers.IsPodKnownTerminated(uid) {
		return pod, nil, critletRetryLater
	}
	pod, mirrorPod, _ := kl.podManager.GetPodAndMirrorPod(pod)
	if pod == nil {
		return nil, nil, critletRetryGone
	}
	return pod, mirrorPod, critletRetryNow
}

func critletUIDs(pods []*v1.Pod) []types.UID {
	out := make([]types.UID, len(pods))
	for i, p := range pods {
		out[i] = p.UID
	}
	return out
}
