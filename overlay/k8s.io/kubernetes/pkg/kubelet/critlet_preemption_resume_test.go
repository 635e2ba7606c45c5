//go:build critlet_patch

package kubelet

import (
	"os"
	"path/filepath"
	"testing"

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
		t.Cleanup(func() { kubeletstate.SetCheckpoints(nil) })
		root := t.TempDir()
		_, ctx := ktesting.NewTestContext(t)
		critletResumePreemptions(ctx, root)
		_, err := os.Lstat(filepath.Join(root, checkpoint.Dir))
		switch {
		case on && (err != nil || kubeletstate.Get().Checkpoints == nil):
			t.Errorf("on: directory %v, store %v; want both", err, kubeletstate.Get().Checkpoints)
		case !on && (!os.IsNotExist(err) || kubeletstate.Get().Checkpoints != nil):
			t.Errorf("off: directory %v, store %v; want neither", err, kubeletstate.Get().Checkpoints)
		}
	}
}
