//go:build e2enode

package e2enode

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A kubelet restarted while a pod holds a device, the plugin registering
// again at once (as a plugin watching the kubelet's socket does): every
// kubelet admits the running pod without allocating, so it keeps its
// container and its device, none Failed.
//
// Then a node rebooted while pods hold devices: the kubelet starts with its
// checkpoints, no pod's containers left and the device plugin not back
// yet; the plugin comes back 10 s after the kubelet, and a new pod needing
// a device arrives in between. The stock kubelet and critlet's defaults
// fail both pods for good, as upstream does (kubernetes#117955, #133382:
// recorded, and required of both alike). With --critical-device-readmission
// both are held, and run once the plugin is back: the holder with the
// devices it had, none Failed.
func TestDevicePluginBackAfterReboot(t *testing.T) {
	const widget = v1.ResourceName("critlet.example/widget")
	opts := scenarioOptions{critletVariants: []kubeletUnderTest{deviceReadmitting}, timeout: 6 * time.Minute}
	runScenario(t, "24 device plugin back after a reboot", opts, func(e *env) {
		holds := e.kubelet.name == deviceReadmitting.name
		ids := []string{"widget-0", "widget-1"}
		_, stop := e.runDevicePlugin(string(widget), ids...)
		e.t.Cleanup(stop)
		e.waitAllocatable(widget, 2)
		withWidget := func(s podSpec) podSpec {
			one := resource.MustParse("1")
			s.requests, s.limits = v1.ResourceList{widget: one}, v1.ResourceList{widget: one}
			return s
		}
		holder := e.createRunning(withWidget(bestEffort("holder")))[0]
		before := e.deviceHolders(widget)["holder"]
		if len(before) != 1 {
			e.t.Fatalf("the holder holds %v before the reboot, want one widget", before)
		}
		stop = e.restartKubeletWithPlugin(holder, widget, before, stop, ids)

		if err := suite.StopKubelet(); err != nil {
			e.t.Fatalf("stopping the kubelet: %v", err)
		}
		stop()
		if err := suite.RemovePodSandboxes(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := suite.StartKubelet(e.ctx); err != nil {
			e.t.Fatalf("starting the kubelet after the reboot: %v", err)
		}
		started := time.Now()
		arrived := e.create(withWidget(bestEffort("arrived")))
		e.settle(10*time.Second - time.Since(started))
		e.startDevicePlugin(string(widget), ids...)
		e.note("plugin back %s after the kubelet started", time.Since(started).Round(100*time.Millisecond))

		for _, p := range []*v1.Pod{holder, arrived} {
			cur := e.waitPhase(p, 2*time.Minute, v1.PodRunning, v1.PodFailed)
			e.note("%s: %s %s", p.Name, cur.Status.Phase, cur.Status.Reason)
			if holds {
				if cur.Status.Phase != v1.PodRunning {
					e.t.Errorf("%s ended %s %q (%s), want Running once the plugin was back", p.Name, cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
				}
				e.waitEvent([]*v1.Pod{cur}, "AdmittedAfterDevicePlugin", 30*time.Second) // events are sent after the status
				if e.eventCount(cur, "WaitingForDevicePlugin") != 1 || e.eventCount(cur, "AdmittedAfterDevicePlugin") != 1 {
					e.t.Errorf("%s: events %v, want one WaitingForDevicePlugin and one AdmittedAfterDevicePlugin", p.Name, e.eventReasons(cur))
				}
				continue
			}
			if cur.Status.Phase != v1.PodFailed || cur.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(cur.Status.Message, "device") {
				e.t.Errorf("%s: %s %q (%s), want Failed UnexpectedAdmissionError for the device plugin not back, as upstream", p.Name, cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
			}
		}
		if holds {
			after := e.deviceHolders(widget)
			if !slices.Equal(after["holder"], before) {
				e.t.Errorf("the holder runs with %v after the reboot, want the devices it had, %v", after["holder"], before)
			}
			if got := after["arrived"]; len(got) != 1 || slices.Contains(before, got[0]) {
				e.t.Errorf("the pod arriving in the window holds %v, want the other widget", got)
			}
			if got := e.scrape("kubelet_device_readmissions_total")[`kubelet_device_readmissions_total{result="admitted"}`]; got != 2 {
				e.t.Errorf(`kubelet_device_readmissions_total{result="admitted"} = %v, want 2`, got)
			}
		}
	})
}

// restartKubeletWithPlugin restarts the kubelet and the device plugin
// right after it, and checks that holder, running with devices of
// resource, kept its container and its devices. It returns the new
// plugin's stop.
func (e *env) restartKubeletWithPlugin(holder *v1.Pod, resource v1.ResourceName, devices []string, stopPlugin func(), ids []string) func() {
	e.t.Helper()
	holder, err := e.get(holder)
	if err != nil {
		e.t.Fatalf("getting %s: %v", holder.Name, err)
	}
	if err := suite.StopKubelet(); err != nil {
		e.t.Fatalf("stopping the kubelet: %v", err)
	}
	stopPlugin()
	if err := suite.StartKubelet(e.ctx); err != nil {
		e.t.Fatalf("starting the kubelet again: %v", err)
	}
	_, stop := e.runDevicePlugin(string(resource), ids...)
	e.t.Cleanup(stop)
	// The kubelet admits the pods it finds in order; a pod created now is
	// admitted after the holder, so once it runs the holder has been.
	e.createRunning(bestEffort("after-restart"))
	cur, err := e.get(holder)
	if err != nil {
		e.t.Fatalf("getting %s: %v", holder.Name, err)
	}
	e.note("kubelet restart: %s %s, container kept %t", cur.Name, cur.Status.Phase, containerID(cur) == containerID(holder))
	if cur.Status.Phase != v1.PodRunning || containerID(cur) != containerID(holder) || restarts(cur) != restarts(holder) {
		e.t.Errorf("after a kubelet restart %s is %s %q with container %s (%d restarts), want Running with %s (%d)", cur.Name, cur.Status.Phase, cur.Status.Reason,
			containerID(cur), restarts(cur), containerID(holder), restarts(holder))
	}
	if got := e.deviceHolders(resource)[holder.Name]; !slices.Equal(got, devices) {
		e.t.Errorf("after a kubelet restart %s holds %v, want %v", holder.Name, got, devices)
	}
	return stop
}

var deviceReadmitting = critletKubelet.with([]string{"--critical-device-readmission"}, nil)
