//go:build critlet_patch

package kubelet

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	devicecheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// critletRegistered has the device manager's checkpoint read as listing
// registered (nil: unreadable) for the test.
func critletRegistered(t *testing.T, registered map[string][]string) {
	before := critletReadRegisteredDevices
	critletReadRegisteredDevices = func() (map[string][]string, error) {
		if registered == nil {
			return nil, errors.New("no checkpoint")
		}
		return registered, nil
	}
	t.Cleanup(func() { critletReadRegisteredDevices = before })
}

// Under a topology policy a pod whose plugin registered with no healthy
// device (the device manager's checkpoint lists the resource with no
// device) is refused TopologyAffinityError, which names no resource: it is
// held for each resource it requests that the device manager knows with
// no healthy device, and admitted once one is healthy.
func TestCritletHeldForATopologyRefusalWhileNoDeviceIsHealthy(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, recorder := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	critletRegistered(t, map[string][]string{critletWidget: {}, "example.com/other": {"o-0"}})
	plugin.mu.Lock()
	plugin.topology = true
	plugin.mu.Unlock()
	pod := critletWidgetPod("topology-held")
	critletAddHeld(tCtx, t, kl, pod)
	if events := critletEvents(recorder); !critletHasEvent(events, critletReasonWaitingForDevicePlugin) {
		t.Errorf("events %v, want %s", events, critletReasonWaitingForDevicePlugin)
	}
	held := kl.critletHeldForDevices().All()
	if len(held) != 1 || len(held[0].Waiting) != 1 || held[0].Waiting[0] != critletWidget {
		t.Fatalf("held %+v, want the pod waiting for %s only", held, critletWidget)
	}
	kl.critletRetryHeldForDevices(tCtx)
	if asked := plugin.set(0, ""); asked != 1 || !kl.critletHeldForDevices().Has(pod.UID) {
		t.Fatalf("no device healthy yet: admission asked %d times, want the first refusal only, the pod still held", asked)
	}
	plugin.set(1, "")
	kl.critletRetryHeldForDevices(tCtx)
	if !kl.allocationManager.HasPodAllocatedResources(pod.UID) {
		t.Fatal("the pod was not admitted once a device was healthy")
	}
}

// After the window, a topology refusal is refused as upstream refuses it,
// the device manager's checkpoint unread.
func TestCritletTopologyRefusalAfterTheWindow(t *testing.T) {
	tCtx := ktesting.Init(t)
	testKubelet, plugin, _ := critletDeviceKubelet(t, true)
	kl := testKubelet.kubelet
	read := 0
	before := critletReadRegisteredDevices
	critletReadRegisteredDevices = func() (map[string][]string, error) { read++; return map[string][]string{critletWidget: {}}, nil }
	t.Cleanup(func() { critletReadRegisteredDevices = before })
	plugin.mu.Lock()
	plugin.topology = true
	plugin.mu.Unlock()
	kl.critletRetryHeldForDevices(tCtx) // the window opens
	testKubelet.fakeClock.Step(2 * time.Minute)
	pod := critletWidgetPod("topology-late")
	kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
	if status, found := kl.statusManager.GetPodStatus(pod.UID); !found || status.Reason != topologymanager.ErrorTopologyAffinity || read != 0 {
		t.Fatalf("status %v %+v, checkpoint read %d times; want Failed %s, unread", found, status, read, topologymanager.ErrorTopologyAffinity)
	}
}

// A topology refusal is refused as upstream refuses it when the device
// manager does not know the resource (no plugin ever registered it), when
// its devices are healthy (an alignment the node cannot give), or when the
// device manager's checkpoint cannot be read.
func TestCritletTopologyRefusalOtherwiseAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		registered map[string][]string
		healthy    int
	}{
		{"resource unknown", map[string][]string{"example.com/other": {"o-0"}}, 0},
		{"devices healthy", map[string][]string{critletWidget: {"widget-0"}}, 1},
		{"checkpoint unreadable", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tCtx := ktesting.Init(t)
			testKubelet, plugin, _ := critletDeviceKubelet(t, true)
			kl := testKubelet.kubelet
			critletRegistered(t, tc.registered)
			plugin.set(tc.healthy, "")
			plugin.mu.Lock()
			plugin.topology = true
			if tc.healthy > 0 {
				plugin.other = topologymanager.ErrorTopologyAffinity
			}
			plugin.mu.Unlock()
			pod := critletWidgetPod("topology-refused")
			kl.HandlePodAdditions(tCtx, []*v1.Pod{pod})
			if kl.critletHeldForDevices().Has(pod.UID) {
				t.Fatal("held")
			}
			status, found := kl.statusManager.GetPodStatus(pod.UID)
			if !found || status.Phase != v1.PodFailed || status.Reason != topologymanager.ErrorTopologyAffinity {
				t.Fatalf("status %v %+v, want Failed %s", found, status, topologymanager.ErrorTopologyAffinity)
			}
		})
	}
}

// The device manager's checkpoint as it writes it is read back; one
// altered after its checksum, or missing, is an error.
func TestCritletRegisteredDevicesReadsTheDeviceManagersCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	before := critletDeviceCheckpoint
	critletDeviceCheckpoint = path
	t.Cleanup(func() { critletDeviceCheckpoint = before })
	if got, err := critletRegisteredDevices(); err != nil || len(got) != 0 {
		t.Fatalf("no checkpoint: %v, %v; want nothing registered", got, err)
	}
	want := map[string][]string{critletWidget: {"widget-0", "widget-1"}, "example.com/unhealthy": {}}
	cp := devicecheckpoint.New(nil, want)
	blob, err := cp.MarshalCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := critletRegisteredDevices()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %v, %v; want %v", got, err, want)
	}
	forged := bytes.Replace(blob, []byte("widget-1"), []byte("widget-9"), 1)
	if err := os.WriteFile(path, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := critletRegisteredDevices(); err == nil {
		t.Fatalf("a checkpoint altered after its checksum was read: %v", got)
	}
	// Not a regular file: a link to a valid one, a FIFO.
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, fifo} {
		critletDeviceCheckpoint = p
		if got, err := critletRegisteredDevices(); err == nil {
			t.Errorf("%s was read: %v", p, got)
		}
	}
}
