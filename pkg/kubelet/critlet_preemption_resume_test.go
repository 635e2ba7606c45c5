//go:build critlet_patch

package kubelet

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/critlet/critlet/pkg/kubelet/preemption/checkpoint"
	critletoptions "github.com/critlet/critlet/pkg/kubelet/preemption/options"
)

// On, the record's store is opened under the kubelet's root directory and
// handed to the handler; off, nothing is created there and no store is
// handed over, as with the stock kubelet.
func TestCritletResumeOpensTheStoreOnlyWhenOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		critletSettings(t, func(o *critletoptions.Options) { o.Resume = on })
		checkpoint.Install(nil)
		t.Cleanup(func() { checkpoint.Install(nil) })
		root := t.TempDir()
		_, ctx := ktesting.NewTestContext(t)
		critletResumePreemptions(ctx, root)
		_, err := os.Lstat(filepath.Join(root, checkpoint.Dir))
		switch {
		case on && (err != nil || checkpoint.Installed() == nil):
			t.Errorf("on: directory %v, store %v; want both", err, checkpoint.Installed())
		case !on && (!os.IsNotExist(err) || checkpoint.Installed() != nil):
			t.Errorf("off: directory %v, store %v; want neither", err, checkpoint.Installed())
		}
	}
}
