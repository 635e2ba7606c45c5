//go:build critlet_patch

package kubelet

// critlet's outage-recovery patch (pkg/patched): what a container runtime
// outage does to a pod the kubelet is terminating.
//
//   - Upstream's pod workers retry a failed sync after 10s; a kill cut off
//     by a runtime restart therefore waits that long after the runtime is
//     back (kubernetes#92906), and the new stop starts a whole new grace
//     period. Here a terminating pod whose kill failed with the runtime
//     unreachable is handed to its pod worker again on package killretry's
//     schedule (250ms doubling to upstream's 10s), with what is left of the
//     grace period its termination began with.
//   - While the runtime restarts, a running container may be missing from
//     its answer; upstream then counts a restart unless the pod was deleted
//     (convertToAPIContainerStatuses). A pod the kubelet is terminating is
//     not restarted either, so no restart is counted for it.
//
// With the setting off both hooks return at once.

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/critletmetrics"
	"github.com/critlet/critlet/pkg/killretry"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
)

// critletAfterFunc schedules a retry; tests fire it by hand.
var critletAfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }

// critletOutageRecovery reports whether the patch is on, as the kubelet
// main published it.
func critletOutageRecovery() bool {
	return kubeletstate.Get().Settings.On(patched.OutageRecovery)
}

// critletRetryUnreachableKill runs after completeWork queued uid's failed
// sync for the usual backoff. For a terminating pod whose sync failed with
// the runtime unreachable it hands the pod workers the pod's last update
// again after killretry's delay, with what is left of the grace period the
// termination began with. The work queue would not do: the sync loop that
// drains it is the goroutine admitting the critical pod, blocked until the
// victims are gone. A retry that fails the same way comes back here.
func (p *podWorkers) critletRetryUnreachableKill(logger klog.Logger, uid types.UID, syncErr error) {
	if !critletOutageRecovery() || !killretry.Unreachable(syncErr) {
		return
	}
	if p.critletTerminating(uid) == nil {
		return
	}
	delay, first := kubeletstate.Get().KillRetries.Failed(uid, p.clock.Now())
	critletmetrics.UnreachableKillRetries.Inc()
	// Once per outage at Info; every retry of a long one at V(2).
	verbosity := 2
	if first {
		verbosity = 0
	}
	logger.V(verbosity).Info("Killing a pod failed with the container runtime unreachable; retrying soon", "podUID", uid,
		"after", delay.Round(time.Millisecond), "err", syncErr)
	critletAfterFunc(delay, func() {
		// Read when the retry goes: a pod that finished terminating
		// meanwhile needs none (one finishing after this check ignores it).
		retry := p.critletTerminating(uid)
		if retry == nil {
			return
		}
		logger.V(2).Info("Retrying the kill of a pod after the container runtime was unreachable", "pod", klog.KObj(retry.Pod), "podUID", uid,
			"gracePeriodLeft", *retry.KillPodOptions.PodTerminationGracePeriodSecondsOverride)
		p.UpdatePod(klog.NewContext(context.Background(), logger), *retry)
	})
}

// critletTerminating returns, for a pod whose termination has begun and not
// ended, a kill update repeating its last one with what is left of the grace
// period the termination began with; nil for any other pod. A termination
// begun by the pod's natural end (completeSync) has no grace period stored
// yet: it is the one the pod workers would give it, its spec's.
func (p *podWorkers) critletTerminating(uid types.UID) *UpdatePodOptions {
	p.podLock.Lock()
	defer p.podLock.Unlock()
	status, ok := p.podSyncStatuses[uid]
	if !ok || !status.IsTerminationRequested() || status.IsTerminated() || status.activeUpdate == nil || status.activeUpdate.Pod == nil {
		return nil
	}
	grace := status.gracePeriod
	if grace == 0 {
		grace, _ = calculateEffectiveGracePeriod(status, status.activeUpdate.Pod, nil)
	}
	now := p.clock.Now()
	left := killretry.GraceLeft(kubeletstate.Get().KillRetries.Deadline(uid, status.terminatingAt, grace), now)
	return &UpdatePodOptions{
		Pod:            status.activeUpdate.Pod,
		MirrorPod:      status.activeUpdate.MirrorPod,
		UpdateType:     kubetypes.SyncPodKill,
		KillPodOptions: &KillPodOptions{PodTerminationGracePeriodSecondsOverride: &left},
	}
}

// critletRestartsNotCounted returns how many of the restarts just counted
// for a container the runtime did not list are not restarts: all of them
// when the kubelet is terminating pod.
func (kl *Kubelet) critletRestartsNotCounted(logger klog.Logger, pod *v1.Pod, status *v1.ContainerStatus) int32 {
	if !critletOutageRecovery() || !kl.podWorkers.IsPodTerminationRequested(pod.UID) {
		return 0
	}
	logger.V(2).Info("Not counting a restart for a container missing while its pod is terminated", "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", status.Name)
	return 1
}
