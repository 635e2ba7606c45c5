//go:build critlet_patch

package kubelet

// Static-pod re-admission's hook tested through the upstream code that runs it, not by calling
// the hook's function: a hook moved to another branch of its upstream
// function, or dropped from it, fails here while the function's own tests
// still pass.

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/readmission"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

// A refused static pod is tried again at housekeeping, and only when the
// kubelet's sources are ready, as held pods are.
func TestCritletHousekeepingRetriesRefusedStaticPods(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.StaticPodReadmission, true) })
	tCtx := ktesting.Init(t)
	testKubelet, plugin, _ := critletDeviceKubelet(t, false)
	plugin.set(1, "")
	kl := testKubelet.kubelet
	critletResetReadmission(t)
	h := &critletCountingAdmitHandler{refuse: true}
	kl.allocationManager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{h})
	pod := newStaticPod("static-refused", "static")
	pod.Namespace = "kube-system"
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	h.set(false)
	testKubelet.fakeClock.Step(readmission.DefaultBackoff.Max)
	critletHousekeeping(tCtx, kl, false)
	if asked := h.set(false); asked != 1 {
		t.Fatalf("sources not ready: admission asked %d times, want the first refusal only", asked)
	}
	critletHousekeeping(tCtx, kl, true)
	if asked := h.set(false); asked != 2 {
		t.Fatalf("housekeeping: admission asked %d times, want 2", asked)
	}
	checkPodStatus(t, kl, pod, v1.PodPending)
}
