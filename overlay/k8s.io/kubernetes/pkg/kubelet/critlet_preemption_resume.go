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

	"k8s.io/klog/v2"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
)

// critletResumePreemptions opens the preemption checkpoint under
// rootDirectory. A kubelet that cannot keep it runs on without resuming
// (as the stock kubelet), saying so.
func critletResumePreemptions(ctx context.Context, rootDirectory string) {
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
}
