//go:build critlet_patch

package kubelet

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/readmission"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

// critletCountingAdmitHandler refuses while refuse is true, with refusal
// (OutOfcpu when unset), and counts the admissions it was asked for.
type critletCountingAdmitHandler struct {
	mu      sync.Mutex
	refuse  bool
	refusal lifecycle.PodAdmitResult
	asked   int
}

func (h *critletCountingAdmitHandler) Admit(context.Context, *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked++
	switch {
	case !h.refuse:
		return lifecycle.PodAdmitResult{Admit: true}
	case h.refusal.Reason != "":
		return h.refusal
	}
	return lifecycle.PodAdmitResult{Admit: false, Reason: "OutOfcpu", Message: "no room"}
}

func (h *critletCountingAdmitHandler) set(refuse bool) (asked int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse = refuse
	return h.asked
}

// A refused static pod is tried again through the kubelet's admit handlers
// (never admitted around them), refused again while they refuse, and
// admitted once they admit: Pending, out of the queue. Off, nothing is
// queued and nothing is tried again.
func TestCritletStaticPodReadmittedThroughTheAdmitHandlers(t *testing.T) {
	for _, on := range []bool{true, false} {
		critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.StaticPodReadmission, on) })
		tCtx := ktesting.Init(t)
		testKubelet := newTestKubelet(t, false)
		defer testKubelet.Cleanup()
		kl := testKubelet.kubelet
		kl.nodeLister = testNodeLister{nodes: []*v1.Node{{
			ObjectMeta: metav1.ObjectMeta{Name: string(kl.nodeName)},
			Status:     v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourcePods: *resource.NewQuantity(110, resource.DecimalSI)}},
		}}}
		h := &critletCountingAdmitHandler{refuse: true}
		kl.allocationManager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{h})
		pod := newStaticPod("readmit-"+map[bool]string{true: "on", false: "off"}[on], "static")
		pod.Namespace = "kube-system"

		kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
		checkPodStatus(t, kl, pod, v1.PodFailed)
		if !on {
			if q := critletReadmission(); q != nil {
				t.Fatal("a queue exists with the setting off")
			}
			testKubelet.fakeClock.Step(time.Hour)
			kl.critletRetryRefusedAdmissions(tCtx)
			if asked := h.set(false); asked != 1 {
				t.Fatalf("off: admission asked %d times, want the one refusal", asked)
			}
			checkPodStatus(t, kl, pod, v1.PodFailed)
			continue
		}
		// Due after its first backoff; still refused.
		testKubelet.fakeClock.Step(readmission.DefaultBackoff.First)
		kl.critletRetryRefusedAdmissions(tCtx)
		if asked := h.set(false); asked != 2 {
			t.Fatalf("admission asked %d times, want 2: the retry must go through the admit handlers", asked)
		}
		checkPodStatus(t, kl, pod, v1.PodFailed)
		testKubelet.fakeClock.Step(readmission.DefaultBackoff.Max)
		kl.critletRetryRefusedAdmissions(tCtx)
		if asked := h.set(false); asked != 3 {
			t.Fatalf("admission asked %d times, want 3", asked)
		}
		checkPodStatus(t, kl, pod, v1.PodPending)
		if n := critletReadmission().Len(); n != 0 {
			t.Fatalf("%d pods still queued after the admission", n)
		}
	}
}
