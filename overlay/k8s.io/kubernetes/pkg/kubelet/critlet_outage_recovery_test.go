//go:build critlet_patch

package kubelet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

// The settings the CRITLET_* variables give, as the kubelet main publishes
// them: hack/test-patched-kubelet.sh runs upstream's tests of this package
// with the patches off, then on.
func init() {
	if err := kubeletstate.SetSettingsFromEnvironment(); err != nil {
		panic(err)
	}
}

// critletSettings publishes the settings change makes of the current ones
// for the test, and the earlier ones again after it.
func critletSettings(t *testing.T, change func(*critletsettings.Settings)) {
	t.Helper()
	before := kubeletstate.Get().Settings
	o := before
	change(&o)
	kubeletstate.SetSettings(o)
	t.Cleanup(func() { kubeletstate.SetSettings(before) })
}

// critletKillUnreachable is a kill's error as the kubelet reports it when
// the runtime is down: the container's gRPC error flattened to text.
func critletKillUnreachable() error {
	unavailable := grpcstatus.Error(codes.Unavailable, "connection error: dial unix /run/containerd/containerd.sock: connect: connection refused")
	return fmt.Errorf("failed to %q for %q with %w: %q", kubecontainer.KillContainer, "c", kubecontainer.ErrKillContainer, unavailable.Error())
}

// critletFailingKills returns pod workers whose kills fail with the runtime
// unreachable; after kill n fails the clock reads began+after[n], and the
// kill after the last of after succeeds. Each kill's grace arrives on the
// channel (-1 for none).
func critletFailingKills(t *testing.T, isTerminal bool, after []time.Duration) (*podWorkers, *clocktesting.FakePassiveClock, <-chan int64) {
	logger, _ := ktesting.NewTestContext(t)
	w, _, _ := createPodWorkers(logger)
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	began := clock.Now()
	w.clock = clock
	graces := make(chan int64, len(after)+2)
	kills := 0
	w.podSyncer = &podSyncerFuncs{
		syncPod: func(context.Context, kubetypes.SyncPodType, *v1.Pod, *v1.Pod, *kubecontainer.PodStatus) (bool, func(), error) {
			return isTerminal, nil, nil
		},
		syncTerminatingPod: func(_ context.Context, _ *v1.Pod, _ *kubecontainer.PodStatus, grace *int64, _ func(*v1.PodStatus)) error {
			graces <- ptr.Deref(grace, -1)
			if kills == len(after) {
				return nil
			}
			clock.SetTime(began.Add(after[kills]))
			kills++
			return fmt.Errorf("error killing terminating pod: %w", critletKillUnreachable())
		},
		syncTerminatingRuntimePod: func(context.Context, *kubecontainer.Pod) error { return nil },
		syncTerminatedPod:         func(context.Context, *v1.Pod, *kubecontainer.PodStatus) error { return nil },
	}
	return w, clock, graces
}

func critletPod(uid types.UID, grace int64) *v1.Pod {
	pod := newNamedPod(string(uid), "ns", string(uid), false)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	return pod
}

// critletGraces reads n kills' grace periods.
func critletGraces(t *testing.T, graces <-chan int64, n int) []int64 {
	t.Helper()
	var got []int64
	for range n {
		select {
		case g := <-graces:
			got = append(got, g)
		case <-time.After(time.Minute):
			t.Fatalf("kills so far had grace %v; the next never came", got)
		}
	}
	return got
}

// Each retry is given what is left of the grace the termination began with:
// 30s at the kill, 20s left 10s later, 18s left at 12s (not 20s less 12s
// again, the pod workers having stored the 20s), and once the grace has run
// out, the pod workers' floor of 1s.
func TestCritletOutageRetryKeepsTheGraceTheTerminationBeganWith(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, true) })
	w, _, graces := critletFailingKills(t, false, []time.Duration{10 * time.Second, 12 * time.Second, 40 * time.Second})
	pod := critletPod("outage-grace", 30)
	w.UpdatePod(t.Context(), UpdatePodOptions{UpdateType: kubetypes.SyncPodKill, Pod: pod})
	got := critletGraces(t, graces, 4)
	if want := []int64{30, 20, 18, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kills had grace %v, want %v", got, want)
	}
}

// A pod whose containers ended by themselves begins terminating with no
// grace period stored; its retry gets what is left of its spec's grace.
func TestCritletOutageRetryOfANaturalEndKeepsItsSpecGrace(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, true) })
	w, _, graces := critletFailingKills(t, true, []time.Duration{5 * time.Second})
	pod := critletPod("outage-natural-end", 30)
	w.UpdatePod(t.Context(), UpdatePodOptions{UpdateType: kubetypes.SyncPodCreate, Pod: pod})
	got := critletGraces(t, graces, 2)
	if want := []int64{-1, 25}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kills had grace %v, want %v (none given first: the spec's 30s)", got, want)
	}
}

// Off, a failed kill waits for upstream's backoff: no early retry.
func TestCritletOutageRetryOff(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, false) })
	w, _, graces := critletFailingKills(t, false, []time.Duration{time.Second})
	w.UpdatePod(t.Context(), UpdatePodOptions{UpdateType: kubetypes.SyncPodKill, Pod: critletPod("outage-off", 30)})
	critletGraces(t, graces, 1)
	select {
	case g := <-graces:
		t.Fatalf("a kill retried (grace %d) with outage recovery off", g)
	case <-time.After(3 * time.Second): // three times the first retry's delay
	}
}

// No restart is counted for a container missing while its pod terminates;
// for any other pod, or with the setting off, upstream's count stands.
func TestCritletRestartsNotCounted(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	w, _, _ := createPodWorkers(logger)
	kl := &Kubelet{podWorkers: w}
	running, terminating := critletPod("running", 30), critletPod("terminating", 30)
	w.UpdatePod(ctx, UpdatePodOptions{UpdateType: kubetypes.SyncPodCreate, Pod: running})
	w.UpdatePod(ctx, UpdatePodOptions{UpdateType: kubetypes.SyncPodKill, Pod: terminating})
	drainAllWorkers(w)
	status := &v1.ContainerStatus{Name: "c", RestartCount: 1}
	for _, tc := range []struct {
		on   bool
		pod  *v1.Pod
		want int32
	}{
		{true, terminating, 1}, {true, running, 0}, {false, terminating, 0}, {false, running, 0},
	} {
		critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, tc.on) })
		if got := kl.critletRestartsNotCounted(logger, tc.pod, status); got != tc.want {
			t.Errorf("outage recovery %v, pod %s: %d restarts not counted, want %d", tc.on, tc.pod.Name, got, tc.want)
		}
	}
}

// A retry whose pod finished terminating while it waited is dropped: the
// timer looks again before handing the pod workers anything.
func TestCritletOutageRetrySkipsAPodTerminatedMeanwhile(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, true) })
	retries := make(chan func(), 1)
	before := critletAfterFunc
	critletAfterFunc = func(_ time.Duration, f func()) { retries <- f }
	t.Cleanup(func() { critletAfterFunc = before })
	w, clock, graces := critletFailingKills(t, false, []time.Duration{time.Second})
	pod := critletPod("outage-terminated-meanwhile", 30)
	w.UpdatePod(t.Context(), UpdatePodOptions{UpdateType: kubetypes.SyncPodKill, Pod: pod})
	critletGraces(t, graces, 1)
	var retry func()
	select {
	case retry = <-retries:
	case <-time.After(time.Minute):
		t.Fatal("no retry was scheduled")
	}
	// The pod finishes terminating by another path before the retry goes.
	w.podLock.Lock()
	status := w.podSyncStatuses[pod.UID]
	status.terminatedAt = clock.Now()
	last := status.activeUpdate
	w.podLock.Unlock()
	retry()
	drainAllWorkers(w)
	w.podLock.Lock()
	handed := status.pendingUpdate != nil || status.activeUpdate != last
	w.podLock.Unlock()
	if handed {
		t.Fatal("a pod terminated meanwhile was handed to its worker again")
	}
}
