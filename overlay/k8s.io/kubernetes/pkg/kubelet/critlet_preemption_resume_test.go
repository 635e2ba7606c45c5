//go:build critlet_patch

package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
		kubeletstate.SetEvents(nil)
		t.Cleanup(func() { kubeletstate.SetCheckpoints(nil); kubeletstate.SetEvents(nil) })
		root := t.TempDir()
		_, ctx := ktesting.NewTestContext(t)
		critletResumePreemptions(ctx, root, fake.NewClientset().CoreV1(), "node-1")
		if got := kubeletstate.Get().Events != nil; got != on {
			t.Errorf("on=%v: the event sink published: %v", on, got)
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

// The handler's sink creates an event in its namespace through the
// kubelet's event client, with the recorder's source for this node; the
// API server's errors come back as they are.
func TestCritletResumeEventSink(t *testing.T) {
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.PreemptionResume, true) })
	t.Cleanup(func() { kubeletstate.SetCheckpoints(nil); kubeletstate.SetEvents(nil) })
	client := fake.NewClientset()
	_, ctx := ktesting.NewTestContext(t)
	critletResumePreemptions(ctx, t.TempDir(), client.CoreV1(), "node-1")
	sink := kubeletstate.Get().Events
	if sink == nil || sink.Source != (v1.EventSource{Component: "kubelet", Host: "node-1"}) {
		t.Fatalf("sink %+v, want one with the kubelet's source on node-1", sink)
	}
	ev := &v1.Event{ObjectMeta: metav1.ObjectMeta{Name: "victim.1", Namespace: "ns"}, Reason: "Preempting"}
	if err := sink.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if got, err := client.CoreV1().Events("ns").Get(context.Background(), "victim.1", metav1.GetOptions{}); err != nil || got.Reason != "Preempting" {
		t.Fatalf("the event in the API: %+v, %v", got, err)
	}
	if err := sink.Create(context.Background(), ev); !apierrors.IsAlreadyExists(err) {
		t.Errorf("the same event again: %v, want AlreadyExists", err)
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
			t.Cleanup(func() { kubeletstate.SetCheckpoints(nil); kubeletstate.SetEvents(nil) })
			TestNewMainKubeletStandAlone(t)
			if got := kubeletstate.Get().Checkpoints != nil; got != on {
				t.Errorf("setting %v: the record opened by NewMainKubelet: %v", on, got)
			}
		})
	}
}
