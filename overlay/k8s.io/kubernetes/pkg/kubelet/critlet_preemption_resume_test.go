//go:build critlet_patch

package kubelet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

// On, the record's store is opened under the kubelet's root directory and
// handed to the handler; off, nothing is created there and no store is
// handed over, as with the stock kubelet.
func TestCritletResumeOpensTheStoreOnlyWhenOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.PreemptionResume, on) })
		kubeletstate.SetCheckpoints(nil)
		kubeletstate.SetPreemptingEvents(nil)
		t.Cleanup(func() { kubeletstate.SetCheckpoints(nil); kubeletstate.SetPreemptingEvents(nil) })
		root := t.TempDir()
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewClientset()
		critletResumePreemptions(ctx, root, client)
		if got := kubeletstate.Get().PreemptingEvents != nil; got != on {
			t.Errorf("on=%v: the event lookup published: %v", on, got)
		}
		_, err := os.Lstat(filepath.Join(root, checkpoint.Dir))
		switch {
		case on && (err != nil || kubeletstate.Get().Checkpoints == nil):
			t.Errorf("on: directory %v, store %v; want both", err, kubeletstate.Get().Checkpoints)
		case !on && (!os.IsNotExist(err) || kubeletstate.Get().Checkpoints != nil):
			t.Errorf("off: directory %v, store %v; want neither", err, kubeletstate.Get().Checkpoints)
		}
	}
}

// The handler's lookup asks the API server for the pod's Preempting events
// from a kubelet, in the pod's namespace, and reports whether there is one.
func TestCritletHasPreemptingEvent(t *testing.T) {
	for _, held := range []int{0, 1, 2} {
		client := fake.NewClientset()
		var sel fields.Selector
		client.PrependReactor("list", "events", func(a core.Action) (bool, runtime.Object, error) {
			l := a.(core.ListAction)
			if l.GetNamespace() != "ns" {
				t.Errorf("listed events in %q, want the pod's namespace", l.GetNamespace())
			}
			sel = l.GetListRestrictions().Fields
			return true, &v1.EventList{Items: make([]v1.Event, held)}, nil
		})
		found, err := critletHasPreemptingEvent(context.Background(), client, "ns", "uid-1")
		if err != nil || found != (held > 0) {
			t.Errorf("%d events held: found %v, %v", held, found, err)
		}
		want := fields.Set{"involvedObject.uid": "uid-1", "reason": "Preempting", "source": "kubelet"}
		if sel == nil || !sel.Matches(want) || sel.Matches(fields.Set{"involvedObject.uid": "uid-2", "reason": "Preempting", "source": "kubelet"}) ||
			sel.Matches(fields.Set{"involvedObject.uid": "uid-1", "reason": "Killing", "source": "kubelet"}) ||
			sel.Matches(fields.Set{"involvedObject.uid": "uid-1", "reason": "Preempting", "source": "kube-scheduler"}) {
			t.Errorf("field selector %v, want exactly %v", sel, want)
		}
	}
	client := fake.NewClientset()
	client.PrependReactor("list", "events", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := critletHasPreemptingEvent(context.Background(), client, "ns", "uid-1"); err == nil {
		t.Error("a failed list answered, want its error")
	}
}

// The hook in NewMainKubelet: upstream's own test builds a kubelet through
// it (standalone, root directory /tmp/rootdir); with the setting on that
// kubelet's handler has the record, off it has none.
func TestCritletResumeHookInNewMainKubelet(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.PreemptionResume, on) })
			kubeletstate.SetCheckpoints(nil)
			t.Cleanup(func() { kubeletstate.SetCheckpoints(nil) })
			TestNewMainKubeletStandAlone(t)
			if got := kubeletstate.Get().Checkpoints != nil; got != on {
				t.Errorf("setting %v: the record opened by NewMainKubelet: %v", on, got)
			}
		})
	}
}
