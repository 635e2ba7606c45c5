//go:build critlet_patch

package kubelet

// Outage recovery's hook tested through the upstream code that runs it, not by calling
// the hook's function: a hook moved to another branch of its upstream
// function, or dropped from it, fails here while the function's own tests
// still pass.

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/critlet/critlet/pkg/patched"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

// The restart a container missing while its pod terminates would count is
// withheld in the status the kubelet builds; with the setting off, or for
// a pod not terminating, upstream's count stands.
func TestCritletRestartHookInTheStatusTheKubeletBuilds(t *testing.T) {
	for _, tc := range []struct {
		on, terminating, deleted bool
		want                     int32
	}{{true, true, false, 0}, {true, false, false, 1}, {false, true, false, 1},
		// Deleted: upstream counts no restart, and nothing is withheld.
		{true, true, true, 0}} {
		critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.OutageRecovery, tc.on) })
		tCtx := ktesting.Init(t)
		testKubelet := newTestKubelet(t, false)
		kl := testKubelet.kubelet
		kl.podWorkers, _, _ = createPodWorkers(klog.Background())
		pod := critletPod(types.UID(map[bool]string{true: "terminating", false: "running"}[tc.terminating]), 30)
		pod.Spec.Containers = []v1.Container{{Name: "c"}}
		if tc.deleted {
			pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		update := kubetypes.SyncPodCreate
		if tc.terminating {
			update = kubetypes.SyncPodKill
		}
		kl.podWorkers.UpdatePod(tCtx, UpdatePodOptions{UpdateType: update, Pod: pod})
		drainAllWorkers(kl.podWorkers.(*podWorkers))
		// Running before; the runtime now lists no container for it.
		before := []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
		got := kl.convertToAPIContainerStatuses(tCtx, pod, &kubecontainer.PodStatus{ID: pod.UID}, before, pod.Spec.Containers, sets.New[string](), false, false, false)
		if len(got) != 1 || got[0].RestartCount != tc.want {
			t.Errorf("outage recovery %v, terminating %v, deleted %v: statuses %+v, want restart count %d", tc.on, tc.terminating, tc.deleted, got, tc.want)
		}
		testKubelet.Cleanup()
	}
}
