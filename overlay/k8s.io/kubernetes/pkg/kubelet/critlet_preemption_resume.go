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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/events"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
)

// critletResumePreemptions opens the preemption checkpoint under
// rootDirectory, and gives the handler client to look up the Preempting
// events an earlier kubelet may not have sent. A kubelet that cannot keep
// the checkpoint runs on without resuming (as the stock kubelet), saying
// so.
func critletResumePreemptions(ctx context.Context, rootDirectory string, client clientset.Interface) {
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
	if client != nil {
		kubeletstate.SetPreemptingEvents(func(ctx context.Context, namespace string, uid types.UID) (bool, error) {
			return critletHasPreemptingEvent(ctx, client, namespace, uid)
		})
	}
}

// critletHasPreemptingEvent reports whether the API server holds a
// Preempting event a kubelet recorded for the pod uid.
func critletHasPreemptingEvent(ctx context.Context, client clientset.Interface, namespace string, uid types.UID) (bool, error) {
	sel := fields.Set{"involvedObject.uid": string(uid), "reason": events.PreemptContainer, "source": "kubelet"}
	list, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return false, err
	}
	return len(list.Items) > 0, nil
}
