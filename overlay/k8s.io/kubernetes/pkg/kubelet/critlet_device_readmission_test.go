//go:build critlet_patch

package kubelet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	critletsettings "github.com/critlet/critlet/pkg/settings"
)

const critletWidget = "example.com/widget"

// critletPluginState plays a device plugin for both sides of the kubelet:
// the container manager's healthy devices, and the allocate handler that
// refuses as the device manager does while the plugin is not back.
type critletPluginState struct {
	mu      sync.Mutex
	healthy int
	other   string // a refusal for something else than devices, when set
	// short: the device manager refuses for devices held by other pods,
	// with the plugin there.
	short bool
	// awayOnAdmit: the plugin goes again as the pod is admitted, after
	// its devices were listed healthy.
	awayOnAdmit bool
	// awayOnce: one refusal as if the plugin were away, its devices still
	// listed healthy (it went and came back around the attempt).
	awayOnce bool
	// awayAs, when set, is the resource an away refusal names: another
	// plugin the pod needs, still away.
	awayAs string
	// topology: a topology policy's refusal while no device is healthy.
	topology bool
	asked    int
}

func (s *critletPluginState) Admit(context.Context, *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	switch {
	case s.other != "":
		return lifecycle.PodAdmitResult{Reason: s.other, Message: "no room"}
	case s.short:
		return lifecycle.PodAdmitResult{Reason: lifecycle.UnexpectedAdmissionError,
			Message: "Allocate failed due to requested number of devices unavailable for " + critletWidget + ". Requested: 1, Available: 0, which is unexpected"}
	case s.topology && s.healthy == 0:
		return lifecycle.PodAdmitResult{Reason: topologymanager.ErrorTopologyAffinity, Message: "Resources cannot be allocated with Topology locality"}
	case s.awayOnAdmit:
		s.healthy = 0
		fallthrough
	case s.healthy == 0 || s.awayOnce || s.awayAs != "":
		s.awayOnce = false
		away := critletWidget
		if s.awayAs != "" && s.healthy > 0 {
			away = s.awayAs
		}
		return lifecycle.PodAdmitResult{Reason: lifecycle.UnexpectedAdmissionError,
			Message: "Allocate failed due to cannot allocate unregistered device " + away + ", which is unexpected"}
	}
	return lifecycle.PodAdmitResult{Admit: true}
}

func (s *critletPluginState) set(healthy int, other string) (asked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthy, s.other = healthy, other
	return s.asked
}

type critletDevicesCM struct {
	cm.ContainerManager
	plugin *critletPluginState
}

func (c critletDevicesCM) GetAllocatableDevices(klog.Logger) []*podresourcesapi.ContainerDevices {
	c.plugin.mu.Lock()
	defer c.plugin.mu.Unlock()
	if c.plugin.healthy == 0 {
		return nil
	}
	ids := make([]string, c.plugin.healthy)
	for i := range ids {
		ids[i] = "widget-" + string(rune('0'+i))
	}
	return []*podresourcesapi.ContainerDevices{{ResourceName: critletWidget, DeviceIds: ids}}
}

// critletDeviceKubelet is a test kubelet whose one device plugin is down,
// with device-readmission set as on says (window 1m).
func critletDeviceKubelet(t *testing.T, on bool) (*TestKubelet, *critletPluginState, *record.FakeRecorder) {
	critletSettings(t, func(o *critletsettings.Settings) {
		*o = o.With(patched.DeviceReadmission, on)
		o.DeviceReadmissionWindow = time.Minute
	})
	critletDeviceHoldsMu.Lock()
	critletDeviceHolds = nil
	critletDeviceHoldsMu.Unlock()
	t.Cleanup(func() {
		critletDeviceHoldsMu.Lock()
		critletDeviceHolds = nil
		critletDeviceHoldsMu.Unlock()
	})
	testKubelet := newTestKubelet(t, false)
	t.Cleanup(testKubelet.Cleanup)
	kl := testKubelet.kubelet
	kl.nodeLister = testNodeLister{nodes: []*v1.Node{{
		ObjectMeta: metav1.ObjectMeta{Name: string(kl.nodeName)},
		Status:     v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourcePods: *resource.NewQuantity(110, resource.DecimalSI)}},
	}}}
	plugin := &critletPluginState{}
	kl.containerManager = critletDevicesCM{kl.containerManager, plugin}
	kl.allocationManager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{plugin})
	// The pod workers themselves, not the test kubelet's stand-in that
	// syncs every update: their guard is what keeps a held pod unstarted.
	kl.podWorkers, _, _ = createPodWorkers(klog.Background())
	recorder := record.NewFakeRecorder(100)
	kl.recorder = recorder
	return testKubelet, plugin, recorder
}

// critletAddHeld adds pod, which admission refuses, syncs it and runs
// housekeeping, and fails t unless it is held: no status, no pod worker,
// no allocation (the kubelet would start it on its next update).
func critletAddHeld(tCtx context.Context, t *testing.T, kl *Kubelet, pod *v1.Pod) {
	t.Helper()
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	// Neither a sync (the container manager names pods whose devices change
	// health) nor housekeeping starts it.
	kl.HandlePodSyncs(tCtx, []*v1.Pod{pod})
	if err := kl.HandlePodCleanups(tCtx); err != nil {
		t.Fatal(err)
	}
	if _, found := kl.statusManager.GetPodStatus(pod.UID); found {
		t.Fatal("the held pod has a status: it was rejected")
	}
	if _, ok := critletWorker(kl.podWorkers.(*podWorkers), pod.UID); ok {
		t.Fatal("the held pod was handed to a pod worker")
	}
	if kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatal("the held pod has an allocation: the kubelet would start it on its next update")
	}
}

func critletWidgetPod(name string) *v1.Pod {
	one := v1.ResourceList{critletWidget: resource.MustParse("1")}
	return podWithUIDNameNsSpec(types.UID(name), name, "default", v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: one, Limits: one}}},
	})
}

// critletRefusedAgain holds a pod called name, brings its plugin back,
// sets how the device manager refuses the retry, retries, and fails t
// unless the pod is still held with no status.
func critletRefusedAgain(t *testing.T, name string, refuse func(*critletPluginState)) (*TestKubelet, *critletPluginState, context.Context) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, _ := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	pod := critletWidgetPod(name)
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	plugin.set(1, "")
	plugin.mu.Lock()
	refuse(plugin)
	plugin.mu.Unlock()
	kl.critletRetryHeldForDevices(tCtx)
	if _, found := kl.statusManager.GetPodStatus(pod.UID); found || kl.critletHeldForDevices().Len() != 1 {
		t.Fatal("a held pod refused again for its plugin was not held on")
	}
	return testKubelet, plugin, tCtx
}

// critletWorker returns the pod workers' sync status of pod uid, if they
// know it.
func critletWorker(w *podWorkers, uid types.UID) (*podSyncStatus, bool) {
	w.podLock.Lock()
	defer w.podLock.Unlock()
	s, ok := w.podSyncStatuses[uid]
	return s, ok
}

func critletEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func critletHasEvent(events []string, reason string) bool {
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") {
			return true
		}
	}
	return false
}

// A pod refused while its device plugin is not back is held (no status, no
// allocation, even one checkpointed before a reboot), tried again through the admit handlers once the plugin has
// healthy devices, and admitted then: an API pod and a static pod alike.
func TestCritletHeldPodAdmittedOnceThePluginIsBack(t *testing.T) {
	for _, static := range []bool{false, true} {
		t.Run(map[bool]string{false: "api pod", true: "static pod"}[static], func(t *testing.T) {
			critletHeldPodAdmittedOnceThePluginIsBack(t, static)
		})
	}
}

func critletHeldPodAdmittedOnceThePluginIsBack(t *testing.T, static bool) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, recorder := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	pod := critletWidgetPod("gpu-user")
	if static {
		pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	}
	// Admitted before a reboot: its allocation is checkpointed.
	if err := kl.allocationManager.SetAllocatedResources(klog.Background(), pod); err != nil {
		t.Fatal(err)
	}

	critletAddHeld(tCtx, t, kl, pod)
	if !critletHasEvent(critletEvents(recorder), critletReasonWaitingForDevicePlugin) {
		t.Error("no WaitingForDevicePlugin event on the held pod")
	}
	// Housekeeping starts active pods the pod workers do not know: the held
	// pod is active for the kubelet (the device manager keeps its devices)
	// but not where housekeeping looks.
	isHeld := func(p *v1.Pod) bool { return p.UID == pod.UID }
	if !slices.ContainsFunc(kl.GetActivePods(), isHeld) || slices.ContainsFunc(kl.critletNotHeldForDevices(kl.GetActivePods()), isHeld) {
		t.Fatal("the held pod is not left out of housekeeping's active pods")
	}
	// Housekeeping while the plugin is still away: nothing is tried.
	testKubelet.fakeClock.Step(10 * time.Second)
	kl.critletRetryHeldForDevices(tCtx)
	if asked := plugin.set(0, ""); asked != 1 {
		t.Fatalf("admission asked %d times while the plugin was away, want the first refusal only", asked)
	}
	plugin.set(2, "")
	kl.critletRetryHeldForDevices(tCtx)
	if asked := plugin.set(2, ""); asked != 2 {
		t.Fatalf("admission asked %d times once the plugin was back, want 2: the retry must go through the admit handlers", asked)
	}
	if !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatal("the pod was not admitted once its plugin was back")
	}
	if n := kl.critletHeldForDevices().Len(); n != 0 {
		t.Errorf("%d pods still held after the admission", n)
	}
	if !critletHasEvent(critletEvents(recorder), critletReasonAdmittedAfterPlugin) {
		t.Error("no AdmittedAfterDevicePlugin event")
	}
}

// Refused with the device manager's own reason when the window closes with
// the plugin still away; refused at once for anything but devices, after
// the window, and with the setting off.
func TestCritletHeldPodRefusedAsUpstreamOtherwise(t *testing.T) {
	t.Run("window closes", func(t *testing.T) {
		tCtx := ktesting.Init(t)
		testKubelet, _, _ := critletDeviceKubelet(t, true)
		kl := testKubelet.kubelet
		pod := critletWidgetPod("never-back")
		kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
		testKubelet.fakeClock.Step(time.Minute)
		kl.critletRetryHeldForDevices(tCtx)
		checkPodStatus(t, kl, pod, v1.PodFailed)
		status, _ := kl.statusManager.GetPodStatus(pod.UID)
		if status.Reason != lifecycle.UnexpectedAdmissionError || !strings.Contains(status.Message, "unregistered device") {
			t.Errorf("refused with %s: %s, want the device manager's refusal", status.Reason, status.Message)
		}
	})
	t.Run("refused again for something else", func(t *testing.T) {
		tCtx := ktesting.Init(t)
		testKubelet, plugin, _ := critletDeviceKubelet(t, true)
		kl := testKubelet.kubelet
		pod := critletWidgetPod("no-room")
		kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
		plugin.set(1, "OutOfcpu")
		kl.critletRetryHeldForDevices(tCtx)
		checkPodStatus(t, kl, pod, v1.PodFailed)
		if status, _ := kl.statusManager.GetPodStatus(pod.UID); status.Reason != "OutOfcpu" {
			t.Errorf("refused with %s, want the retry's reason OutOfcpu", status.Reason)
		}
	})
	t.Run("refused again for its plugin: held on, one backoff step", func(t *testing.T) {
		testKubelet, plugin, tCtx := critletRefusedAgain(t, "away-again", func(s *critletPluginState) { s.awayOnAdmit = true })
		kl := testKubelet.kubelet
		// Within the backoff step (2 s) it is not tried; after it, it is.
		plugin.set(1, "")
		testKubelet.fakeClock.Step(time.Second)
		kl.critletRetryHeldForDevices(tCtx)
		if asked := plugin.set(1, ""); asked != 2 {
			t.Fatalf("admission asked %d times within the backoff, want 2", asked)
		}
		testKubelet.fakeClock.Step(2 * time.Second)
		kl.critletRetryHeldForDevices(tCtx)
		if asked := plugin.set(1, ""); asked != 3 {
			t.Errorf("admission asked %d times after the backoff, want 3", asked)
		}
	})
	t.Run("refused for its plugin though back by the time it is read: held on", func(t *testing.T) {
		testKubelet, _, tCtx := critletRefusedAgain(t, "back-again", func(s *critletPluginState) { s.awayOnce = true })
		kl := testKubelet.kubelet
		pod := critletWidgetPod("back-again")
		testKubelet.fakeClock.Step(2 * time.Second)
		kl.critletRetryHeldForDevices(tCtx)
		if !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
			t.Error("not admitted after its backoff")
		}
	})
	// Deleted while held: refused at the next housekeeping (so that its
	// deletion completes), its plugin back or not, and never admitted.
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("deleted while held, its plugin back %v", back), func(t *testing.T) {
			tCtx := ktesting.Init(t)
			testKubelet, plugin, _ := critletDeviceKubelet(t, true)
			kl := testKubelet.kubelet
			pod := critletWidgetPod("deleted")
			kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
			deleted := pod.DeepCopy()
			deleted.DeletionTimestamp = &metav1.Time{Time: testKubelet.fakeClock.Now()}
			kl.podManager.UpdatePod(deleted)
			if back {
				plugin.set(1, "")
			}
			// The next housekeeping, long before the window closes.
			testKubelet.fakeClock.Step(2 * time.Second)
			kl.critletRetryHeldForDevices(tCtx)
			checkPodStatus(t, kl, pod, v1.PodFailed)
			if h := kl.critletHeldForDevices(); h.Len() != 0 || kl.allocationManager.HasPodAllocatedResources(pod.UID) {
				t.Errorf("%d pods still held after the deletion, admitted %v", h.Len(), kl.allocationManager.HasPodAllocatedResources(pod.UID))
			}
			if asked := plugin.set(1, ""); asked != 1 {
				t.Errorf("admission asked %d times, want the first refusal only: a deleted pod is not tried again", asked)
			}
		})
	}
	for _, c := range []struct {
		name  string
		on    bool
		after time.Duration
		other string
		short bool
	}{
		{"off", false, 0, "", false},
		{"after the window", true, time.Minute, "", false},
		{"not for devices", true, 0, "OutOfcpu", false},
		// The device manager's refusal, but not for a plugin that is away
		// (the test's container manager offers no healthy device either).
		{"devices held by other pods", true, 0, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tCtx := ktesting.Init(t)
			testKubelet, plugin, _ := critletDeviceKubelet(t, c.on)
			kl := testKubelet.kubelet
			if c.on {
				kl.critletRetryHeldForDevices(tCtx) // the window opens
			}
			testKubelet.fakeClock.Step(c.after)
			plugin.set(0, c.other)
			plugin.mu.Lock()
			plugin.short = c.short
			plugin.mu.Unlock()
			pod := critletWidgetPod("refused")
			kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
			checkPodStatus(t, kl, pod, v1.PodFailed)
			if h := kl.critletHeldForDevices(); h != nil && h.Len() != 0 {
				t.Errorf("%d pods held", h.Len())
			}
		})
	}
}

// Every path that would start or sync a pod meets in the pod workers'
// UpdatePod: a held static pod is not handed to a pod worker whichever
// path dispatches it (its mirror pod added or removed, a sync,
// housekeeping), a kill is taken, and the pod starts once admitted. A
// static pod whose file is removed (the kill ends its never-started
// worker) and restored stays held, and is started again once admitted.
func TestCritletHeldPodStartsOnlyOnceAdmitted(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, _ := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	workers, _, processed := createPodWorkers(klog.Background())
	kl.podWorkers = workers
	worker := func(uid types.UID) (*podSyncStatus, bool) { return critletWorker(workers, uid) }
	static := func(name string) (*v1.Pod, *v1.Pod) {
		pod := critletWidgetPod(name)
		pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
		mirror := pod.DeepCopy()
		mirror.UID = types.UID(name + "-mirror")
		mirror.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.ApiserverSource, kubetypes.ConfigMirrorAnnotationKey: "mirror"}
		return pod, mirror
	}
	pod, mirror := static("static-gpu")
	restored, _ := static("static-restored")
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod, restored})
	if h := kl.critletHeldForDevices(); h.Len() != 2 {
		t.Fatalf("%d pods held, want both static pods", h.Len())
	}
	for _, path := range []struct {
		name string
		run  func() error
	}{
		{"its mirror pod added", func() error { kl.HandlePodAdditions(tCtx, []*v1.Pod{mirror}); return nil }},
		{"a sync", func() error { kl.HandlePodSyncs(tCtx, []*v1.Pod{pod}); return nil }},
		{"housekeeping", func() error { return kl.HandlePodCleanups(tCtx) }},
		{"its mirror pod removed", func() error { kl.HandlePodRemoves(tCtx, []*v1.Pod{mirror}); return nil }},
	} {
		if err := path.run(); err != nil {
			t.Fatalf("%s: %v", path.name, err)
		}
		if _, ok := worker(pod.UID); ok {
			t.Fatalf("%s: the held pod was handed to a pod worker", path.name)
		}
	}
	// Its file removed: the kill is taken, and the pod workers end a pod
	// that never started.
	kl.HandlePodRemoves(tCtx, []*v1.Pod{restored})
	if _, ok := worker(restored.UID); !ok {
		t.Fatal("the kill of a held pod whose file was removed was dropped")
	}
	drainAllWorkers(workers)
	// Restored before the next housekeeping: upstream skips admission for a
	// pod whose termination was requested and sends a create, which only
	// marks the ended worker to be started again.
	kl.HandlePodAdditions(tCtx, []*v1.Pod{restored})
	if s, _ := worker(restored.UID); s == nil || !s.restartRequested {
		t.Fatal("the restored pod's ended worker is not marked to start again: housekeeping would keep it, and the pod never start")
	}
	plugin.set(1, "")
	testKubelet.fakeClock.Step(2 * time.Second)
	kl.critletRetryHeldForDevices(tCtx)
	if _, ok := worker(pod.UID); !ok {
		t.Fatal("the pod admitted once its plugin was back has no pod worker")
	}
	if kl.allocationManager.HasPodAllocatedResources(restored.UID) || !kl.critletHeldForDevices().Has(restored.UID) {
		t.Fatal("the restored pod was admitted beside its ended worker (inactive: the resource managers could free its allocation)")
	}
	// Housekeeping removes the ended worker and, the pod held, does not
	// start it; the next admits and starts it.
	if err := kl.HandlePodCleanups(tCtx); err != nil {
		t.Fatal(err)
	}
	if _, ok := worker(restored.UID); ok {
		t.Fatal("housekeeping kept the restored pod's ended worker, or started it unadmitted")
	}
	testKubelet.fakeClock.Step(2 * time.Second)
	kl.critletRetryHeldForDevices(tCtx)
	if _, ok := worker(restored.UID); !ok || !kl.allocationManager.HasPodAllocatedResources(restored.UID) {
		t.Fatal("the restored pod was not admitted and started once its ended worker was gone")
	}
	drainAllWorkers(workers)
	var updates []kubetypes.SyncPodType
	for _, r := range processed[pod.UID] {
		updates = append(updates, r.updateType)
	}
	if len(updates) == 0 || updates[0] != kubetypes.SyncPodCreate {
		t.Errorf("the admitted pod's syncs were %v, want a create first", updates)
	}
	if h := kl.critletHeldForDevices(); h.Len() != 0 {
		t.Errorf("%d pods still held after both were admitted", h.Len())
	}
}

// With the setting off there are no holds, and the pod workers' guard
// drops no update: UpdatePod is upstream's.
func TestCritletGuardDropsNothingWithTheSettingOff(t *testing.T) {
	testKubelet, _, _ := critletDeviceKubelet(t, false)
	kl := testKubelet.kubelet
	kl.HandlePodAdditions(ktesting.Init(t), []*v1.Pod{critletWidgetPod("refused")})
	workers := kl.podWorkers.(*podWorkers)
	for _, update := range []kubetypes.SyncPodType{kubetypes.SyncPodCreate, kubetypes.SyncPodUpdate, kubetypes.SyncPodSync, kubetypes.SyncPodKill} {
		if critletPassOverHeld(workers, klog.Background(), "refused", update) {
			t.Errorf("setting off: the guard dropped a %v update", update)
		}
	}
}

// A pod that also requests an extended resource no device plugin serves (a
// node's own, in its status) waits only for the plugin the device manager
// named, and is admitted once that is back: the node's resource never has
// healthy devices.
func TestCritletHeldPodWaitsOnlyForThePluginNamed(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, _ := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	pod := critletWidgetPod("gpu-and-dongle")
	dongle := v1.ResourceName("example.com/dongle")
	for _, l := range []v1.ResourceList{pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits} {
		l[dongle] = resource.MustParse("1")
	}
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	held := kl.critletHeldForDevices().All()
	if len(held) != 1 || !slices.Equal(held[0].Waiting, []string{critletWidget}) {
		t.Fatalf("held = %+v, want the pod waiting for %s only", held, critletWidget)
	}
	plugin.set(1, "")
	kl.critletRetryHeldForDevices(tCtx)
	if !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatalf("the pod was not admitted once %s was back (held: %+v)", critletWidget, kl.critletHeldForDevices().All())
	}
}

// A pod needing two plugins, both away, is refused for the first the
// device manager reaches; retried once that one is back, it is refused for
// the other and waits for that one then.
func TestCritletHeldPodWaitsForTheNextPluginNamed(t *testing.T) {
	const gadget = "example.com/gadget"
	testKubelet, _, _ := critletRefusedAgain(t, "two-plugins", func(s *critletPluginState) { s.awayAs = gadget })
	held := testKubelet.kubelet.critletHeldForDevices().All()
	if len(held) != 1 || !slices.Equal(held[0].Waiting, []string{gadget}) {
		t.Fatalf("held = %+v, want the pod waiting for %s, the plugin its retry was refused for", held, gadget)
	}
}

// critletPreemptingKubelet is a test kubelet with critical-device-preemption
// on and device-readmission off, whose allocate handler holds every pod
// while state says victims terminate.
func critletPreemptingKubelet(t *testing.T) (*TestKubelet, *critletCountingAdmitHandler, *record.FakeRecorder) {
	testKubelet, plugin, recorder := critletDeviceKubelet(t, false)
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.CriticalDevicePreemption, true) })
	plugin.set(1, "")
	// Refused as the critical-device-preemption wrapper refuses while a
	// pod's victims terminate.
	state := &critletCountingAdmitHandler{refuse: true, refusal: lifecycle.PodAdmitResult{
		Reason: cm.CritletReasonPreemptingForDevices, Message: "Waiting for the 2 pods preempted for its devices to terminate"}}
	testKubelet.kubelet.allocationManager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{state})
	return testKubelet, state, recorder
}

// A critical pod whose victims are terminating is held as a pod waiting for
// its plugin is (no status, no allocation, no worker, whatever path would
// sync it), with device-readmission off and however long after the
// kubelet's start, tried at every housekeeping without a second event, and
// admitted once the admit handlers let it in: an API pod and a static pod.
func TestCritletPodHeldWhileItsVictimsTerminate(t *testing.T) {
	for _, static := range []bool{false, true} {
		t.Run(map[bool]string{false: "api pod", true: "static pod"}[static], func(t *testing.T) {
			tCtx := ktesting.Init(t)
			testKubelet, state, recorder := critletPreemptingKubelet(t)
			kl := testKubelet.kubelet
			pod := critletWidgetPod("critical")
			if static {
				pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
			}
			// Admitted before a reboot: its allocation is checkpointed.
			if err := kl.allocationManager.SetAllocatedResources(klog.Background(), pod); err != nil {
				t.Fatal(err)
			}
			critletAddHeld(tCtx, t, kl, pod)
			if events := critletEvents(recorder); !critletHasEvent(events, critletReasonWaitingForPreemptedPods) {
				t.Errorf("events %v, want %s", events, critletReasonWaitingForPreemptedPods)
			}
			// Long after any window, still terminating: tried, held on, no
			// second event.
			testKubelet.fakeClock.Step(2 * time.Hour)
			kl.critletRetryHeldForDevices(tCtx)
			if asked := state.set(true); asked != 2 {
				t.Fatalf("admission asked %d times, want the refusal and one retry", asked)
			}
			if _, found := kl.statusManager.GetPodStatus(pod.UID); found || !kl.critletHeldForDevices().Has(pod.UID) {
				t.Fatal("the pod was not held on while its victims terminate")
			}
			if events := critletEvents(recorder); len(events) != 0 {
				t.Errorf("events %v on a retry still held, want none", events)
			}
			state.set(false)
			kl.critletRetryHeldForDevices(tCtx)
			if !kl.allocationManager.HasPodAllocatedResources(pod.UID) || kl.critletHeldForDevices().Has(pod.UID) {
				t.Fatal("the pod was not admitted once its victims had terminated")
			}
			if _, ok := critletWorker(kl.podWorkers.(*podWorkers), pod.UID); !ok {
				t.Error("the admitted pod was not handed to the pod workers")
			}
			if events := critletEvents(recorder); !critletHasEvent(events, critletReasonAdmittedAfterPreemption) {
				t.Errorf("events %v, want %s", events, critletReasonAdmittedAfterPreemption)
			}
		})
	}
}

// A held critical pod deleted while its victims terminate is refused at
// the next housekeeping, so that its deletion completes.
func TestCritletPodHeldForVictimsDeleted(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, _, _ := critletPreemptingKubelet(t)
	kl := testKubelet.kubelet
	pod := critletWidgetPod("critical")
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: testKubelet.fakeClock.Now()}
	kl.podManager.UpdatePod(deleted)
	kl.critletRetryHeldForDevices(tCtx)
	checkPodStatus(t, kl, pod, v1.PodFailed)
	if kl.critletHeldForDevices().Has(pod.UID) {
		t.Error("the deleted pod is still held")
	}
}

// A static pod static-pod-readmission retries while the pods preempted for
// it terminate is not rejected again (its status stays its first
// refusal's) and is due again once one of them has left.
func TestCritletStaticPodRetryWaitsForItsVictims(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, state, _ := critletPreemptingKubelet(t)
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.StaticPodReadmission, true) })
	critletResetReadmission(t)
	kl := testKubelet.kubelet
	pod := critletWidgetPod("static")
	pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	kl.podManager.AddPod(pod)
	kl.rejectPod(tCtx, pod, "OutOfcpu", "no room")
	kl.critletAdmissionRefused(tCtx, pod, "OutOfcpu")
	testKubelet.fakeClock.Step(time.Minute)
	kl.critletRetryRefusedAdmissions(tCtx)
	if asked := state.set(true); asked != 1 {
		t.Fatalf("admission asked %d times, want one retry", asked)
	}
	if status, _ := kl.statusManager.GetPodStatus(pod.UID); status.Reason != "OutOfcpu" {
		t.Errorf("status reason %q, want the first refusal's OutOfcpu kept", status.Reason)
	}
	if critletReadmission().Len() != 1 {
		t.Fatal("the static pod left the re-admission queue")
	}
	state.set(false)
	testKubelet.fakeClock.Step(time.Minute)
	kl.critletRetryRefusedAdmissions(tCtx)
	if !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatal("the static pod was not admitted once its victims had terminated")
	}
}

// critletResetReadmission starts t with an empty static-pod re-admission
// queue and leaves none behind.
func critletResetReadmission(t *testing.T) {
	reset := func() {
		critletReadmissionMu.Lock()
		critletReadmissionQueue = nil
		critletReadmissionMu.Unlock()
	}
	reset()
	t.Cleanup(reset)
}

// The allocate handler keeps a preemption's devices for its pod while
// critlet will admit that pod again: held, or queued by static-pod
// re-admission; not once it is neither.
func TestCritletAwaitsAdmission(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, state, _ := critletPreemptingKubelet(t)
	critletSettings(t, func(o *critletsettings.Settings) { *o = o.With(patched.StaticPodReadmission, true) })
	critletResetReadmission(t)
	kl := testKubelet.kubelet
	held := critletWidgetPod("held")
	kl.HandlePodAdditions(tCtx, []*v1.Pod{held})
	static := critletWidgetPod("static")
	static.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	kl.podManager.AddPod(static)
	kl.critletAdmissionRefused(tCtx, static, "OutOfcpu")
	if !kl.critletAwaitsAdmission(held.UID) || !kl.critletAwaitsAdmission(static.UID) || kl.critletAwaitsAdmission("other") {
		t.Fatal("a held pod and a queued static pod are awaited, nothing else")
	}
	// The admission handler passes over held pods: it reads them here.
	if isHeld := kubeletstate.Get().Held; !isHeld(held.UID) || isHeld(static.UID) {
		t.Error("the admission handler does not see the held pod as held, or sees the static pod so")
	}
	state.set(false)
	kl.critletRetryHeldForDevices(tCtx)
	if kl.critletAwaitsAdmission(held.UID) {
		t.Error("the held pod, admitted, is still awaited")
	}
}

// With critical-device-preemption on and device-readmission off, a pod
// refused because its plugin is away is rejected as upstream rejects it:
// only a preemption's pods are held.
func TestCritletPluginAwayNotHeldWithoutDeviceReadmission(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, state, _ := critletPreemptingKubelet(t)
	state.set(false)
	kl := testKubelet.kubelet
	plugin := kl.containerManager.(critletDevicesCM).plugin
	plugin.set(0, "")
	pod := critletWidgetPod("plugin-away")
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	checkPodStatus(t, kl, pod, v1.PodFailed)
	if kl.critletHeldForDevices().Has(pod.UID) {
		t.Error("held for its plugin with device-readmission off")
	}
}
