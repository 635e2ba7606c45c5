//go:build e2enode

package e2enode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// A kubelet restarted while a pod holds a device, the plugin registering
// again at once (as a plugin watching the kubelet's socket does): every
// kubelet admits the running pod without allocating, so it keeps its
// container and its device, none Failed.
//
// Then a node rebooted while pods hold devices (a static pod among them,
// its mirror pod in the API): the kubelet starts with its checkpoints, no
// pod's containers left and the device plugin not back yet; the plugin
// comes back 10 s after the kubelet, and a new pod needing a device
// arrives in between. The stock kubelet and critlet's defaults fail the
// three pods for good, as upstream does (kubernetes#117955, #133382:
// recorded, and required of both alike). With --critical-device-readmission
// all three are held, and run once the plugin is back: the holder in a new
// container with the devices it had, none Failed, and the static pod,
// which the file source hands the kubelet before the API's mirror pod,
// with no container in the runtime until then (a static pod started
// unadmitted would have one). The holder restarts
// always, as a Deployment's pod does: a pod that never restarts is Failed
// by every kubelet once its containers are gone, devices or not.
func TestDevicePluginBackAfterReboot(t *testing.T) {
	const widget = v1.ResourceName("critlet.example/widget")
	opts := scenarioOptions{critletVariants: []kubeletUnderTest{deviceReadmitting}, timeout: 6 * time.Minute}
	runScenario(t, "24 device plugin back after a reboot", opts, func(e *env) {
		holds := e.kubelet.name == deviceReadmitting.name
		ids := []string{"widget-0", "widget-1", "widget-2"}
		stop := e.runDevicePlugin(string(widget), ids...).stop
		e.t.Cleanup(stop)
		e.waitAllocatable(widget, 3)
		withWidget := func(s podSpec) podSpec {
			one := resource.MustParse("1")
			s.requests, s.limits = v1.ResourceList{widget: one}, v1.ResourceList{widget: one}
			return s
		}
		restarting := withWidget(bestEffort("holder"))
		restarting.restartPolicy = v1.RestartPolicyAlways
		holder := e.createRunning(restarting)[0]
		before := e.deviceHolders(widget)["holder"]
		if len(before) != 1 {
			e.t.Fatalf("the holder holds %v before the reboot, want one widget", before)
		}
		// A static pod holding a widget, its mirror pod in the API.
		staticSpec := withWidget(bestEffort(runName("static-holder")))
		staticSpec.restartPolicy = v1.RestartPolicyAlways
		staticSpec.namespace = metav1.NamespaceSystem // where writeStatic looks for its mirror
		static := e.waitPhase(e.writeStatic(staticSpec), 2*time.Minute, v1.PodRunning)
		staticUID := static.Annotations[kubetypes.ConfigMirrorAnnotationKey]
		if got := e.deviceHolders(widget)[static.Name]; staticUID == "" || len(got) != 1 {
			e.t.Fatalf("the static pod (UID %q) holds %v before the reboot, want one widget", staticUID, got)
		}
		stop = e.restartKubeletWithPlugin(holder, widget, before, stop, ids)
		holder, err := e.get(holder)
		if err != nil {
			e.t.Fatalf("getting %s: %v", holder.Name, err)
		}

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
		// The plugin must come back after the kubelet has tried both pods,
		// not merely 10 s after it started: on a busy machine a kubelet can
		// be Ready before it has taken its pods from the API.
		for _, p := range []*v1.Pod{holder, arrived} {
			e.waitTriedWithoutPlugin(p, holds, 2*time.Minute)
		}
		e.waitStaticTriedWithoutPlugin(static, holds, 2*time.Minute)
		e.note("the three pods tried %s after the kubelet started", time.Since(started).Round(100*time.Millisecond))
		e.settle(10*time.Second - time.Since(started))
		// The file source is read before the API's mirror pod: held or
		// refused, the static pod has no container in the runtime.
		if cs, err := suite.PodContainers(e.ctx, staticUID); err != nil || len(cs) != 0 {
			e.t.Errorf("the static pod has containers %v (%v) while its plugin is away, want none: started unadmitted", cs, err)
		}
		e.startDevicePlugin(string(widget), ids...)
		e.note("plugin back %s after the kubelet started", time.Since(started).Round(100*time.Millisecond))

		for _, p := range []*v1.Pod{holder, arrived} {
			// The holder's status still says Running from before the
			// reboot: only a new container, or Failed, is the kubelet's word.
			cur := e.waitNewContainerOrFailed(p, containerID(p), 2*time.Minute)
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
		cur := e.waitNewContainerOrFailed(static, containerID(static), 2*time.Minute)
		e.note("%s: %s %s", cur.Name, cur.Status.Phase, cur.Status.Reason)
		switch {
		case holds && cur.Status.Phase != v1.PodRunning:
			e.t.Errorf("the static pod ended %s %q (%s), want Running once the plugin was back", cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
		case !holds && (cur.Status.Phase != v1.PodFailed || cur.Status.Reason != "UnexpectedAdmissionError"):
			e.t.Errorf("the static pod: %s %q (%s), want Failed UnexpectedAdmissionError for the device plugin not back, as upstream", cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
		}
		if holds {
			after := e.deviceHolders(widget)
			if got := after[static.Name]; len(got) != 1 || slices.Contains(after["holder"], got[0]) || slices.Contains(after["arrived"], got[0]) {
				e.t.Errorf("the static pod runs with %v, want a widget of its own (holder %v, arrived %v)", got, after["holder"], after["arrived"])
			}
			if cs, err := suite.PodContainers(e.ctx, staticUID); err != nil || len(cs) == 0 {
				e.t.Errorf("the static pod, Running, has no container in the runtime (%v)", err)
			}
			if cur, err := e.get(holder); err != nil || cur.Status.Phase != v1.PodRunning {
				e.t.Errorf("the holder is not Running at the end (%v): %v", err, cur.Status)
			}
			if !slices.Equal(after["holder"], before) {
				e.t.Errorf("the holder runs with %v after the reboot, want the devices it had, %v", after["holder"], before)
			}
			if got := after["arrived"]; len(got) != 1 || slices.Contains(before, got[0]) {
				e.t.Errorf("the pod arriving in the window holds %v, want the other widget", got)
			}
			if got := e.scrape("kubelet_device_readmissions_total")[`kubelet_device_readmissions_total{result="admitted"}`]; got != 3 {
				e.t.Errorf(`kubelet_device_readmissions_total{result="admitted"} = %v, want 3`, got)
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
	stop := e.runDevicePlugin(string(resource), ids...).stop
	e.t.Cleanup(stop)
	// The kubelet admits the pods it finds in order; a pod created now is
	// admitted after the holder, so once it runs the holder has been.
	after := e.createRunning(bestEffort("after-restart"))[0]
	cur, err := e.get(holder)
	if err != nil {
		e.t.Fatalf("getting %s: %v", holder.Name, err)
	}
	// Never restarted, it would fail in the reboot that follows.
	e.deleteAndWait(after)
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

// waitTriedWithoutPlugin waits until the kubelet has tried p while its
// device plugin is away: held (a WaitingForDevicePlugin event) where the
// kubelet holds such pods, else refused (Failed).
func (e *env) waitTriedWithoutPlugin(p *v1.Pod, holds bool, timeout time.Duration) {
	e.t.Helper()
	if !holds {
		e.waitPhase(p, timeout, v1.PodFailed)
		return
	}
	e.waitEvent([]*v1.Pod{p}, "WaitingForDevicePlugin", timeout)
}

// waitStaticTriedWithoutPlugin is waitTriedWithoutPlugin for the static pod
// of mirror, whose events are on the static pod.
func (e *env) waitStaticTriedWithoutPlugin(mirror *v1.Pod, holds bool, timeout time.Duration) {
	e.t.Helper()
	if !holds {
		e.waitPhase(mirror, timeout, v1.PodFailed)
		return
	}
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		n, _ := e.staticEvents(mirror, "WaitingForDevicePlugin")
		return n > 0, nil
	})
	if err != nil {
		e.t.Fatalf("static pod %s: not held for its plugin within %s: %v", mirror.Name, timeout, err)
	}
}

var deviceReadmitting = critletKubelet.with([]string{"--critical-device-readmission"}, nil)

// waitNewContainerOrFailed waits until p runs a container other than old
// (old is "" for a pod that has not run) or has failed, and returns it.
func (e *env) waitNewContainerOrFailed(p *v1.Pod, old string, timeout time.Duration) *v1.Pod {
	e.t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		cur, err := e.get(p)
		if err != nil {
			return false, nil
		}
		last = cur
		running := len(cur.Status.ContainerStatuses) == 1 && cur.Status.ContainerStatuses[0].State.Running != nil
		return cur.Status.Phase == v1.PodFailed || (cur.Status.Phase == v1.PodRunning && running && containerID(cur) != old), nil
	})
	if err != nil {
		var status any = "never read"
		if last != nil {
			status = last.Status
		}
		e.t.Fatalf("pod %s/%s: waiting for a container other than %q, or Failed: %v (last status %v)", p.Namespace, p.Name, old, err, status)
	}
	return last
}
