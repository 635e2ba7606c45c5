//go:build critlet_patch

package kubelet

// Device re-admission's hooks tested through the upstream code that runs them, not by calling
// the hook's function: a hook moved to another branch of its upstream
// function, or dropped from it, fails here while the function's own tests
// still pass.

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pleg"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// critletHousekeeping runs one iteration of the kubelet's sync loop with
// only its housekeeping tick ready, the sources ready as ready says.
func critletHousekeeping(tCtx ktesting.TContext, kl *Kubelet, ready bool) {
	kl.sourcesReady = config.NewSourcesReady(func(sets.Set[string]) bool { return ready })
	tick := make(chan time.Time, 1)
	tick <- time.Now()
	if !kl.syncLoopIteration(tCtx, make(chan kubetypes.PodUpdate), kl, make(chan time.Time), tick, make(chan *pleg.PodLifecycleEvent)) {
		tCtx.Fatal("the sync loop stopped")
	}
}

// A pod held while its victims terminate is tried again at housekeeping,
// and only when the kubelet's sources are ready (upstream skips
// housekeeping before: a pod from a source not yet read could be cleaned
// up wrongly).
func TestCritletHousekeepingRetriesHeldPods(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, state, _ := critletPreemptingKubelet(t)
	kl := testKubelet.kubelet
	pod := critletWidgetPod("critical")
	critletAddHeld(tCtx, t, kl, pod)
	state.set(false)
	critletHousekeeping(tCtx, kl, false)
	if asked := state.set(false); asked != 1 || !kl.critletHeldForDevices().Has(pod.UID) {
		t.Fatalf("sources not ready: admission asked %d times, want the first refusal only, the pod still held", asked)
	}
	critletHousekeeping(tCtx, kl, true)
	if asked := state.set(false); asked != 2 || !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatalf("housekeeping: admission asked %d times, want 2, and the pod admitted", asked)
	}
}
