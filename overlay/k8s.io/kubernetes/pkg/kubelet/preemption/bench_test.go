package preemption

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	v1resource "k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/settings"
)

// benchNode is a node of n ordinary pods (API pods, class in status) and a
// shortfall of a third of their cpu and memory requests: many victims.
func benchNode(n int) ([]*v1.Pod, *v1.Pod, []lifecycle.PredicateFailureReason) {
	g := &nodeGen{r: rand.New(rand.NewPCG(uint64(n), 42))}
	pods := g.pods(n)
	for _, p := range pods {
		// As the API server and the kubelet's config sources set them.
		p.Status.QOSClass = qos.ComputePodQOS(p)
		p.Annotations = map[string]string{sourceKey: kubetypes.ApiserverSource}
	}
	var cpu, mem int64
	for _, p := range pods {
		cpu += v1resource.GetResourceRequest(p, v1.ResourceCPU)
		mem += v1resource.GetResourceRequest(p, v1.ResourceMemory)
	}
	admit := g.criticalPod()
	reasons := []lifecycle.PredicateFailureReason{
		&lifecycle.InsufficientResourceError{ResourceName: v1.ResourceCPU, Requested: cpu / 3},
		&lifecycle.InsufficientResourceError{ResourceName: v1.ResourceMemory, Requested: mem / 3},
	}
	return pods, admit, reasons
}

var benchSizes = []int{110, 1000, 5000, 20000}

// BenchmarkHandleAdmissionFailure compares the stock handler and critlet's
// on the same nodes. The stock handler takes minutes per call at 20,000
// pods and is skipped there.
func BenchmarkHandleAdmissionFailure(b *testing.B) {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	impls := []struct {
		name string
		new  implementation
	}{{"stock", stockHandler}, {"critlet", critletHandler(settings.Upstream())}}
	for _, impl := range impls {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("impl=%s/pods=%d", impl.name, n), func(b *testing.B) {
				if impl.name == "stock" && n > 5000 {
					b.Skip("the stock handler takes minutes per admission at this size")
				}
				pods, admit, reasons := benchNode(n)
				victims := 0
				h := impl.new(func() []*v1.Pod { return pods },
					func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error { victims++; return nil },
					&record.FakeRecorder{})
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := h.HandleAdmissionFailure(ctx, admit, reasons, lifecycle.AddOperation); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(victims)/float64(b.N), "victims/op")
			})
		}
	}
}

// BenchmarkRequestFloor is one bare pass of the stock request accounting
// over every pod for each resource of the shortfall: what any algorithm
// that looks at every pod's requests once must spend.
func BenchmarkRequestFloor(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			pods, _, _ := benchNode(n)
			b.ReportAllocs()
			var sink int64
			for b.Loop() {
				for _, p := range pods {
					sink += v1resource.GetResourceRequest(p, v1.ResourceCPU)
					sink += v1resource.GetResourceRequest(p, v1.ResourceMemory)
				}
			}
			_ = sink
		})
	}
}
