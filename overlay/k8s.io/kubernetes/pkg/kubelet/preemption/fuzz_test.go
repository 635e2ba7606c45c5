package preemption

import (
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	v1resource "k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/critlet/critlet/pkg/settings"
)

// FuzzHandleAdmissionFailure drives the stock handler and critlet's through
// nodes drawn from the fuzzer's seeds and checks, besides equality: no pod
// the stock rules protect is killed; either the victims' requests cover
// every shortfall or nothing is killed; the same input gives the same result.
func FuzzHandleAdmissionFailure(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(10), uint8(0), 0.3)
	f.Add(uint64(7), uint64(9), uint8(200), uint8(3), 0.5)
	f.Add(uint64(3), uint64(3), uint8(0), uint8(1), 0.0)
	f.Add(uint64(5), uint64(11), uint8(30), uint8(8), 0.4)
	f.Fuzz(func(t *testing.T, s1, s2 uint64, size, flags uint8, frac float64) {
		if frac != frac || frac < 0 || frac > 2 {
			frac = 0.5
		}
		g := &nodeGen{r: rand.New(rand.NewPCG(s1, s2)), tieHeavy: flags&1 != 0, exotic: flags&2 != 0}
		pods := g.pods(int(size))
		admit := g.criticalPod()
		if flags&4 != 0 {
			admit = g.pod()
		}
		reasons := g.reasons(pods, frac)
		var failing func(*v1.Pod) bool
		if flags&8 != 0 {
			failing = failSome
		}
		want := run(t, stockHandler, admit, pods, reasons, lifecycle.AddOperation, failing)
		got := run(t, critletHandler(settings.Upstream()), admit, pods, reasons, lifecycle.AddOperation, failing)
		if err := compare(want, got, true); err != nil {
			t.Fatal(err)
		}
		if _, err := checkAdmitPodEvents(want, got); err != nil {
			t.Fatal(err)
		}
		dflt := run(t, critletHandler(settings.Defaults()), admit, pods, reasons, lifecycle.AddOperation, failing)
		if err := compare(want, dflt, false); err != nil {
			t.Fatalf("default settings: %v", err)
		}
		if _, err := checkAdmitPodEvents(want, dflt); err != nil {
			t.Fatalf("default settings: %v", err)
		}
		again := run(t, critletHandler(settings.Upstream()), admit, pods, reasons, lifecycle.AddOperation, failing)
		if err := compare(got, again, true); err != nil {
			t.Fatalf("not deterministic: %v", err)
		}
		byUID := map[string]*v1.Pod{}
		for _, p := range pods {
			byUID[string(p.UID)] = p
		}
		var killed []*v1.Pod
		for _, k := range got.kills {
			p := byUID[k.uid]
			if !kubetypes.Preemptable(admit, p) {
				t.Fatalf("killed %s, which %s may not preempt", p.Name, admit.Name)
			}
			killed = append(killed, p)
		}
		if got.err != "" && len(killed) > 0 {
			t.Fatalf("error %q after killing %d pods", got.err, len(killed))
		}
		if len(killed) == 0 {
			return
		}
		for _, r := range reasons {
			ir, ok := r.(*lifecycle.InsufficientResourceError)
			if !ok {
				t.Fatalf("killed pods though %q is not a resource shortfall", r.GetReason())
			}
			var freed int64
			for _, p := range killed {
				freed += v1resource.GetResourceRequest(p, ir.ResourceName)
			}
			if freed < ir.GetInsufficientAmount() {
				t.Fatalf("victims free %d of %s, need %d", freed, ir.ResourceName, ir.GetInsufficientAmount())
			}
		}
	})
}
