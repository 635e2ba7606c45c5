//go:build critlet_patch

package kubelet

// critlet's preemption-resume patch (pkg/patched): the admission handler
// records each preemption's victims under the kubelet's root directory
// before killing any, and a kubelet restarted mid-preemption continues it.
// The handler is built with upstream's fixed signature, which carries no
// directory; this file's one hook, right after NewMainKubelet builds it,
// opens the record there and hands it over. With the setting off it
// returns at once and nothing is created.

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/server"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
)

// critletResumePreemptions opens the preemption checkpoint under
// rootDirectory, and gives the handler events, the kubelet's event client,
// to send victims' Preempting events under names every kubelet resuming
// the preemption gives them alike (the recorder names each event after
// the moment it makes it). A kubelet that cannot keep the checkpoint runs
// on without resuming (as the stock kubelet), saying so.
func critletResumePreemptions(ctx context.Context, rootDirectory string, events v1core.EventsGetter, nodeName types.NodeName) {
	if !kubeletstate.Get().Settings.On(patched.PreemptionResume) {
		return
	}
	logger := klog.FromContext(ctx)
	store, err := checkpoint.Open(logger, rootDirectory, time.Now)
	if err != nil {
		logger.Error(err, "Preemptions will not be resumed after a restart")
		return
	}
	kubeletstate.SetCheckpoints(store)
	if events != nil {
		kubeletstate.SetEvents(&kubeletstate.EventSink{
			Create: func(ctx context.Context, ev *v1.Event) error {
				_, err := events.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
				return err
			},
			// The recorder's source, as cmd/kubelet makes it.
			Source: v1.EventSource{Component: server.ComponentKubelet, Host: string(nodeName)},
		})
	}
}
