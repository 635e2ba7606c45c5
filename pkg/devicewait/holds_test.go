package devicewait

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/readmission"
)

const widget, gadget = "example.com/widget", "example.com/gadget"

var start = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func newHolds() *Holds {
	return New(start, 5*time.Minute, readmission.Backoff{First: 2 * time.Second, Max: time.Minute})
}

func uids(hs []Held) []types.UID {
	var out []types.UID
	for _, h := range hs {
		out = append(out, h.UID)
	}
	return out
}

func TestHoldOnlyInTheWindowAndForAPlugin(t *testing.T) {
	h := newHolds()
	if got := h.Closes(); !got.Equal(start.Add(5 * time.Minute)) {
		t.Fatalf("Closes = %v", got)
	}
	if h.Hold("a", nil, "UnexpectedAdmissionError", "m", start) {
		t.Error("a pod waiting for no plugin was held")
	}
	if h.Hold("b", []string{widget}, "UnexpectedAdmissionError", "m", h.Closes()) {
		t.Error("a pod was held as the window closed")
	}
	if !h.Hold("c", []string{widget}, "UnexpectedAdmissionError", "m", h.Closes().Add(-time.Nanosecond)) {
		t.Error("a pod refused just before the window closed was not held")
	}
	if h.Len() != 1 {
		t.Errorf("Len = %d, want 1", h.Len())
	}
}

func TestRetriedOnceThePluginIsBack(t *testing.T) {
	h := newHolds()
	h.Hold("first", []string{widget}, "UnexpectedAdmissionError", "unregistered widget", start.Add(time.Second))
	h.Hold("second", []string{gadget, widget}, "UnexpectedAdmissionError", "unregistered gadget", start.Add(2*time.Second))
	now := start.Add(10 * time.Second)

	retry, refuse := h.Next(now, map[string]int64{widget: 0})
	if len(retry)+len(refuse) != 0 {
		t.Fatalf("with no healthy device: retry %v, refuse %v", uids(retry), uids(refuse))
	}
	retry, _ = h.Next(now, map[string]int64{widget: 2})
	if got := uids(retry); !slices.Equal(got, []types.UID{"first"}) {
		t.Fatalf("widget back: retry %v, want [first]", got)
	}
	retry, _ = h.Next(now, map[string]int64{widget: 2, gadget: 1})
	if got := uids(retry); !slices.Equal(got, []types.UID{"first", "second"}) {
		t.Fatalf("both back: retry %v, want oldest first [first second]", got)
	}
	if retry[1].Reason != "UnexpectedAdmissionError" || retry[1].Message != "unregistered gadget" || !retry[1].Since.Equal(start.Add(2*time.Second)) {
		t.Errorf("held pod's record: %+v", retry[1])
	}
	if !h.Has("first") || !h.Has("second") || h.Has("never-held") {
		t.Errorf("Has: first %v, second %v, never-held %v", h.Has("first"), h.Has("second"), h.Has("never-held"))
	}
	h.Forget("first")
	h.Forget("first") // forgetting twice is harmless
	if h.Has("first") {
		t.Error("a forgotten pod is still held")
	}
	h.Forget("never-held")
	retry, _ = h.Next(now, map[string]int64{widget: 2, gadget: 1})
	if got := uids(retry); !slices.Equal(got, []types.UID{"second"}) || h.Len() != 1 {
		t.Errorf("after forgetting first: retry %v, Len %d", got, h.Len())
	}
}

func TestRefusedAgainWaitsItsBackoff(t *testing.T) {
	h := newHolds()
	back := map[string]int64{widget: 1}
	h.Hold("p", []string{widget}, "UnexpectedAdmissionError", "unregistered", start)
	now := start.Add(time.Second)
	if retry, _ := h.Next(now, back); len(retry) != 1 {
		t.Fatalf("first attempt once the plugin is back: %v", uids(retry))
	}
	// Tried and refused again (the plugin reported its devices unhealthy
	// between the two calls): one backoff step, 2s.
	if !h.Hold("p", []string{widget}, "UnexpectedAdmissionError", "no healthy devices", now) {
		t.Fatal("refused again in the window, not held")
	}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{time.Second, 0}, {2*time.Second - time.Nanosecond, 0}, {2 * time.Second, 1}} {
		if retry, _ := h.Next(now.Add(c.at), back); len(retry) != c.want {
			t.Errorf("%v after the second refusal: %d to retry, want %d", c.at, len(retry), c.want)
		}
	}
	// The second re-refusal doubles the step.
	later := now.Add(2 * time.Second)
	h.Hold("p", []string{widget}, "UnexpectedAdmissionError", "no healthy devices", later)
	if retry, _ := h.Next(later.Add(4*time.Second-time.Nanosecond), back); len(retry) != 0 {
		t.Error("retried before the doubled step")
	}
	retry, _ := h.Next(later.Add(4*time.Second), back)
	if len(retry) != 1 || retry[0].Retries != 2 || !retry[0].Since.Equal(start) || retry[0].Message != "no healthy devices" {
		t.Errorf("after the doubled step: %+v", retry)
	}
}

func TestWindowCloseRefusesEveryHeldPod(t *testing.T) {
	h := newHolds()
	h.Hold("a", []string{widget}, "UnexpectedAdmissionError", "ma", start)
	h.Hold("b", []string{gadget}, "UnexpectedAdmissionError", "mb", start.Add(time.Minute))
	h.Hold("a", []string{widget}, "UnexpectedAdmissionError", "ma2", start.Add(2*time.Minute))
	back := map[string]int64{widget: 1, gadget: 1}
	if _, refuse := h.Next(h.Closes().Add(-time.Nanosecond), nil); len(refuse) != 0 {
		t.Fatalf("refused before the window closed: %v", uids(refuse))
	}
	// Even with the plugins back, a pod still held when the window closes is
	// refused: its attempt had not come.
	retry, refuse := h.Next(h.Closes(), back)
	if len(retry) != 0 || !slices.Equal(uids(refuse), []types.UID{"a", "b"}) {
		t.Fatalf("at the close: retry %v, refuse %v, want none and [a b]", uids(retry), uids(refuse))
	}
	if refuse[0].Message != "ma2" || refuse[1].Message != "mb" {
		t.Errorf("refused with %q and %q, want each pod's last message", refuse[0].Message, refuse[1].Message)
	}
	if h.Len() != 0 {
		t.Errorf("Len = %d after the close, want 0", h.Len())
	}
	if _, refuse := h.Next(h.Closes().Add(time.Hour), back); len(refuse) != 0 {
		t.Errorf("refused twice: %v", uids(refuse))
	}
}

func TestHoldKeepsItsOwnCopy(t *testing.T) {
	h := newHolds()
	waiting := []string{widget}
	h.Hold("p", waiting, "r", "m", start)
	waiting[0] = gadget
	if retry, _ := h.Next(start, map[string]int64{widget: 1}); len(retry) != 1 || retry[0].Waiting[0] != widget {
		t.Errorf("the caller's slice changed what the pod waits for: %+v", retry)
	}
}

func TestAwayPlugin(t *testing.T) {
	for msg, want := range map[string]string{
		"Allocate failed due to cannot allocate unregistered device example.com/widget, which is unexpected":                                                   widget,
		"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/mig-1g.5gb, which is unexpected":                      "nvidia.com/mig-1g.5gb",
		"cannot allocate unregistered device example.com/widget":                                                                                               widget,
		"Allocate failed due to requested number of devices unavailable for example.com/widget. Requested: 2, Available: 1, which is unexpected":               "",
		"Allocate failed due to previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/widget, which is unexpected": "",
		"Update plugin resources failed due to Allocation failed, which is unexpected.":                                                                        "",
		"Allocate failed due to cannot allocate unregistered device , which is unexpected":                                                                     "",
		"": "",
	} {
		got, ok := AwayPlugin(msg)
		if got != want || ok != (want != "") {
			t.Errorf("AwayPlugin(%q) = %q, %v; want %q, %v", msg, got, ok, want, want != "")
		}
	}
}

// TestPluginAwayErrorsAreTheDeviceManagers: each text PluginAway looks for
// is one the pinned upstream device manager refuses with, so a reworded
// upstream fails here rather than silently holding nothing.
func TestPluginAwayErrorsAreTheDeviceManagers(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating the upstream module: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg/kubelet/cm/devicemanager/manager.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pluginAwayErrors {
		if !strings.Contains(string(src), `fmt.Errorf("`+e+`%s", resource)`) {
			t.Errorf("upstream's device manager no longer refuses with %q", e)
		}
	}
}

// All lists every held pod, whether due or not, oldest first: the kubelet
// checks each for its deletion on every housekeeping.
func TestAllListsEveryHeldPodOldestFirst(t *testing.T) {
	h := newHolds()
	h.Hold("b", []string{widget}, "r", "m", start)
	h.Hold("a", []string{gadget}, "r", "m", start.Add(time.Second))
	h.Hold("b", []string{widget}, "r", "m2", start.Add(2*time.Second))
	if got := uids(h.All()); !slices.Equal(got, []types.UID{"b", "a"}) {
		t.Fatalf("All = %v, want [b a]", got)
	}
	if got := h.All()[0]; got.Message != "m2" || got.Retries != 1 {
		t.Errorf("All()[0] = %+v, want b's latest refusal", got)
	}
	h.Forget("b")
	if got := uids(h.All()); !slices.Equal(got, []types.UID{"a"}) {
		t.Errorf("All after Forget(b) = %v, want [a]", got)
	}
}

// A pod held while pods preempted for it terminate is tried at every Next,
// in order of first refusal with the others, and outlives the window; the
// plugin holds are refused when it closes. Held again for a plugin, it
// waits for the plugin like any other.
func TestHoldPreemptingIgnoresTheWindow(t *testing.T) {
	h := newHolds()
	if !h.Hold("plugin", []string{widget}, "UnexpectedAdmissionError", "m", start) {
		t.Fatal("not held")
	}
	h.HoldPreempting("critical", "PreemptingForDevices", "waiting", start.Add(time.Second))
	h.HoldPreempting("critical", "PreemptingForDevices", "waiting", start.Add(2*time.Second))
	retry, refuse := h.Next(start.Add(3*time.Second), map[string]int64{widget: 1})
	if !slices.Equal(uids(retry), []types.UID{"plugin", "critical"}) || refuse != nil {
		t.Fatalf("Next = %v, %v; want both tried, oldest first", uids(retry), uids(refuse))
	}
	if got := retry[1]; !got.Preempting || got.Retries != 1 || !got.Since.Equal(start.Add(time.Second)) || got.Waiting != nil {
		t.Errorf("preempting hold = %+v, want its first refusal's time, one retry, no plugin", got)
	}
	retry, refuse = h.Next(start.Add(time.Hour), nil)
	if !slices.Equal(uids(retry), []types.UID{"critical"}) || !slices.Equal(uids(refuse), []types.UID{"plugin"}) {
		t.Fatalf("after the window: retry %v, refuse %v; want the preempting hold tried, the plugin's refused", uids(retry), uids(refuse))
	}
	if !h.Has("critical") || h.Has("plugin") || h.Len() != 1 {
		t.Error("after the window only the preempting hold stays")
	}
	h2 := newHolds()
	h2.HoldPreempting("x", "PreemptingForDevices", "waiting", start)
	if !h2.Hold("x", []string{widget}, "UnexpectedAdmissionError", "m", start) {
		t.Fatal("not held for its plugin")
	}
	if retry, _ := h2.Next(start.Add(time.Minute), nil); len(retry) != 0 {
		t.Errorf("held for a plugin with no healthy device: tried %v", uids(retry))
	}
	// The preemption's retries are no plugin backoff: once the plugin is
	// back it is tried at once.
	h3 := newHolds()
	for i := range 5 {
		h3.HoldPreempting("y", "PreemptingForDevices", "waiting", start.Add(time.Duration(i)*time.Second))
	}
	h3.Hold("y", []string{widget}, "UnexpectedAdmissionError", "m", start.Add(5*time.Second))
	if retry, _ := h3.Next(start.Add(5*time.Second), map[string]int64{widget: 1}); !slices.Equal(uids(retry), []types.UID{"y"}) || retry[0].Retries != 0 {
		t.Errorf("held for its plugin after a preemption's retries: tried %v, want at once with no retries counted", uids(retry))
	}
}

// Waited for under a topology policy: each resource a container asks
// devices of that the device manager knows with no healthy device, once;
// not one with healthy devices, nor one no plugin serves (a node's
// extended resource).
func TestWithoutHealthyDevices(t *testing.T) {
	known := func(r string) bool { return r == widget || r == gadget }
	healthy := map[string]int64{gadget: 2}
	pod := func(containers ...v1.ResourceList) *v1.Pod {
		p := &v1.Pod{}
		for i, l := range containers {
			c := v1.Container{Name: fmt.Sprint("c", i), Resources: v1.ResourceRequirements{Limits: l}}
			if i == 0 {
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
				continue
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	one := resource.MustParse("1")
	for _, tc := range []struct {
		pod  *v1.Pod
		want []string
	}{
		{pod(v1.ResourceList{widget: one}, v1.ResourceList{gadget: one, widget: one}), []string{widget}},
		{pod(v1.ResourceList{}, v1.ResourceList{gadget: one}), nil},
		{pod(v1.ResourceList{"example.com/node-extended": one}, v1.ResourceList{widget: one}), []string{widget}},
		{pod(), nil},
	} {
		containers := devicedemand.Containers(tc.pod, known, func(string) map[string]int64 { return nil })
		if got := WithoutHealthyDevices(containers, healthy); !slices.Equal(got, tc.want) {
			t.Errorf("pod %+v: %v, want %v", tc.pod.Spec, got, tc.want)
		}
	}
	containers := devicedemand.Containers(pod(v1.ResourceList{widget: one}, v1.ResourceList{gadget: one}), known, func(string) map[string]int64 { return nil })
	if got := WithoutHealthyDevices(containers, nil); !slices.Equal(got, []string{gadget, widget}) {
		t.Errorf("no healthy device at all: %v, want both, sorted", got)
	}
}
