//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"testing"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	devicecheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	devicepluginstub "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"github.com/critlet/critlet/internal/explain"
	"github.com/critlet/critlet/test/prediction"
)

// The pods of upstream's critical-pod node e2e: a critical pod needing the
// node's whole allocatable cpu and memory preempts the Burstable and the
// Guaranteed pod; the BestEffort pod frees neither and survives.
func TestCriticalPod(t *testing.T) {
	runScenario(t, "1a critical pod (upstream)", scenarioOptions{}, func(e *env) {
		be, bu, gu := e.upstreamFillers(false)
		crit := e.createCritical(critical("critical", e.allocatable()))
		e.expectPhase(be, v1.PodRunning)
		e.expectPreempted(bu, exitsOnTerm)
		e.expectPreempted(gu, exitsOnTerm)
		e.expectVictims(bu.Name, gu.Name)
		e.expectPhase(crit, v1.PodRunning)
		e.checkMetrics(2)
		e.expectPreemptorEvent(crit, "PreemptedForAdmission")
	})
}

// The same with pod-level resources (spec.resources) on every pod.
func TestCriticalPodPodLevelResources(t *testing.T) {
	runScenario(t, "1b critical pod, pod-level resources", scenarioOptions{}, func(e *env) {
		be, bu, gu := e.upstreamFillers(true)
		s := critical("critical", nil)
		s.podLevel = &v1.ResourceRequirements{Requests: e.allocatable()}
		crit := e.createCritical(s)
		e.expectPhase(be, v1.PodRunning)
		e.expectPreempted(bu, exitsOnTerm)
		e.expectPreempted(gu, exitsOnTerm)
		e.expectVictims(bu.Name, gu.Name)
		e.expectPhase(crit, v1.PodRunning)
	})
}

// upstreamFillers creates upstream's three non-critical pods: BestEffort,
// Burstable 100m/100Mi and Guaranteed 100m/100Mi, with container- or
// pod-level resources.
func (e *env) upstreamFillers(podLevel bool) (be, bu, gu *v1.Pod) {
	bus, gus := burstable("burstable", "100m", "100Mi"), guaranteed("guaranteed", "100m", "100Mi")
	if podLevel {
		for _, s := range []*podSpec{&bus, &gus} {
			s.podLevel = &v1.ResourceRequirements{Requests: s.requests, Limits: s.limits}
			s.requests, s.limits = nil, nil
		}
	}
	pods := e.createRunning(bestEffort("besteffort"), bus, gus)
	return pods[0], pods[1], pods[2]
}

// The API server's Priority admission plugin resolves the class to
// spec.priority; the kubelet treats priority >= 2000000000 as critical and
// nothing else, not even the legacy critical-pod annotation.
func TestPriorityThroughAPIServer(t *testing.T) {
	runScenario(t, "2 priority via the API server", scenarioOptions{}, func(e *env) {
		e.ensurePriorityClass("e2e-high", 1_000_000_000)
		all := e.allocatable()
		cases := []struct {
			name         string
			spec         podSpec
			wantPriority int32
			critical     bool
		}{
			{"node-critical", podSpec{namespace: metav1.NamespaceSystem, priorityClass: "system-node-critical"}, 2_000_001_000, true},
			{"cluster-critical", podSpec{namespace: metav1.NamespaceSystem, priorityClass: "system-cluster-critical"}, 2_000_000_000, true},
			{"user-high", podSpec{priorityClass: "e2e-high"}, 1_000_000_000, false},
			{"legacy-annotation", podSpec{namespace: metav1.NamespaceSystem, annotations: map[string]string{"scheduler.alpha.kubernetes.io/critical-pod": ""}}, 0, false},
		}
		var victims []string
		for _, c := range cases {
			filler := e.createRunning(burstable("filler-"+c.name, "100m", "100Mi"))[0]
			s := c.spec
			s.name, s.requests = c.name, all
			p := e.create(s)
			if got := ptr.Deref(p.Spec.Priority, 0); got != c.wantPriority {
				e.t.Errorf("%s: spec.priority = %d, want %d", c.name, got, c.wantPriority)
			}
			if c.critical {
				p = e.waitPhase(p, 3*time.Minute, v1.PodRunning)
				e.expectPreempted(filler, exitsOnTerm)
				victims = append(victims, filler.Name)
				e.deleteAndWait(p)
				continue
			}
			e.expectRejectedForResources(p)
			e.settle(3 * time.Second)
			e.expectPhase(filler, v1.PodRunning)
		}
		e.expectVictims(victims...)
	})
}

// A static critical pod from the manifest directory preempts API pods
// (kubernetes #111174, #116484).
func TestStaticCriticalPod(t *testing.T) {
	runScenario(t, "3 static critical pod", scenarioOptions{}, func(e *env) {
		be, bu, gu := e.upstreamFillers(false)
		start := time.Now()
		mirror := e.writeStatic(staticCritical("static-critical", e.allocatable()))
		e.waitPhase(mirror, 3*time.Minute, v1.PodRunning)
		e.row.latency = time.Since(start)
		e.row.notes = append(e.row.notes, "latency from manifest write to mirror pod Running")
		e.expectPhase(be, v1.PodRunning)
		e.expectPreempted(bu, exitsOnTerm)
		e.expectPreempted(gu, exitsOnTerm)
		e.expectVictims(bu.Name, gu.Name)
	})
}

// staticCritical is a static pod needing req; a static pod is critical
// whatever its priority, and the priority given here is what the API
// server's Priority admission would resolve for system-node-critical.
func staticCritical(name string, req v1.ResourceList) podSpec {
	s := critical(name, req)
	s.annotations = nil // the source sets its own
	s.priority = ptr.To(int32(2_000_001_000))
	return s
}

// staticManifest renders s as a static pod manifest.
func (e *env) staticManifest(s podSpec) []byte {
	e.t.Helper()
	manifest := s.pod("")
	manifest.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	b, err := yaml.Marshal(manifest)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// writeStatic writes s into the kubelet's manifest directory and returns a
// reference to its mirror pod, which the kubelet names <name>-<node>.
func (e *env) writeStatic(s podSpec) *v1.Pod {
	e.t.Helper()
	path := filepath.Join(suite.Config().ManifestDir(), s.name+".yaml")
	if err := os.WriteFile(path, e.staticManifest(s), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return e.mirrorOf(s)
}

func (e *env) mirrorOf(s podSpec) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name + "-" + e.node, Namespace: metav1.NamespaceSystem}}
}

// A pod that is not critical and does not fit is rejected for the resource
// it lacks, and nothing is preempted for it.
func TestNonCriticalRejected(t *testing.T) {
	runScenario(t, "4 non-critical rejected", scenarioOptions{}, func(e *env) {
		be, bu, gu := e.upstreamFillers(false)
		p := e.create(podSpec{name: "too-big", requests: e.allocatable()})
		e.expectRejectedForResources(p)
		e.settle(3 * time.Second)
		for _, f := range []*v1.Pod{be, bu, gu} {
			e.expectPhase(f, v1.PodRunning)
		}
		e.expectVictims()
	})
}

// expectRejectedForResources checks that the kubelet refused p at admission
// for cpu or memory (the reason names the first resource that did not fit).
func (e *env) expectRejectedForResources(p *v1.Pod) {
	e.t.Helper()
	cur := e.waitPhase(p, 2*time.Minute, v1.PodRunning, v1.PodFailed, v1.PodSucceeded)
	if cur.Status.Phase != v1.PodFailed || (cur.Status.Reason != "OutOfcpu" && cur.Status.Reason != "OutOfmemory") {
		e.t.Errorf("pod %s: phase %s reason %q, want Failed with OutOfcpu or OutOfmemory", p.Name, cur.Status.Phase, cur.Status.Reason)
	}
	e.note("%s: %s", p.Name, cur.Status.Reason)
}

// At maxPods the missing resource is "pods": one pod must go. Every pod
// counts as one, so upstream's rule takes a BestEffort pod before touching
// the Burstable or Guaranteed ones.
func TestMaxPods(t *testing.T) {
	const maxPods = 4
	runScenario(t, "5 node at maxPods", scenarioOptions{maxPods: maxPods}, func(e *env) {
		pods := e.createRunning(bestEffort("besteffort-0"), bestEffort("besteffort-1"),
			burstable("burstable", "100m", "100Mi"), guaranteed("guaranteed", "100m", "100Mi"))
		e.createCritical(critical("critical", resources("100m", "100Mi")))
		got := e.victims()
		e.row.victims = got
		if len(got) != 1 || !strings.HasPrefix(got[0], "besteffort-") {
			e.t.Errorf("preempted %v, want exactly one of the BestEffort pods", got)
		}
		for _, p := range pods {
			if len(got) == 1 && p.Name == got[0] {
				e.expectPreempted(p, exitsOnTerm)
			} else {
				e.expectPhase(p, v1.PodRunning)
			}
		}
	})
}

// Extended resources from a device plugin: the node advertises four
// widgets, each held by a non-critical pod of another QoS class or
// priority. Upstream allocates devices in the resource-allocation admit
// handler, which runs before the predicate handler that preempts, so a
// critical pod short of widgets is refused there (UnexpectedAdmissionError)
// and nothing is preempted: the stock kubelet and critlet's defaults. With
// --critical-preemption-devices critlet preempts the pods upstream's rules
// choose for the widgets the pod lacks, with its cpu shortfall when it has
// one (predicted here with upstream's handler, as for cpu and memory), and
// the critical pod runs on the victims' widgets. A pod asking for more
// widgets than the node has is refused by every kubelet, nothing killed.
// With the setting on a node whose topology manager is single-numa-node,
// where freed widgets could still be refused for their alignment, nothing
// is killed: each pod short of widgets is refused as upstream refuses it,
// with a DevicePreemptionSkipped event saying why. (The stub plugin's
// widgets report no NUMA node, so the refusal is the device manager's
// count refusal; a TopologyAffinityError is covered by the unit tests.)
func TestDevicePluginResource(t *testing.T) {
	const widget = v1.ResourceName("critlet.example/widget")
	opts := scenarioOptions{critletVariants: []kubeletUnderTest{devicePreempting, devicePreemptingSingleNUMA}, timeout: 12 * time.Minute}
	runScenario(t, "6 device-plugin resource", opts, func(e *env) {
		preempts := e.kubelet.name == devicePreempting.name
		skips := e.kubelet.name == devicePreemptingSingleNUMA.name
		allocated := e.startDevicePlugin(string(widget), "widget-0", "widget-1", "widget-2", "widget-3").allocated
		e.waitAllocatable(widget, 4)
		e.ensurePriorityClass("critlet-e2e-high", 1000)
		// Each ignores SIGTERM, so a victim ends Failed/Preempting after
		// its 1 s grace period.
		holding := func(s podSpec, n string) podSpec { return holdingDevices(s, widget, n, 1) }
		high := burstable("holder-burstable-high", "100m", "50Mi")
		high.priorityClass = "critlet-e2e-high"
		holders := e.createRunning(
			holding(bestEffort("holder-besteffort"), "1"),
			holding(burstable("holder-burstable", "200m", "50Mi"), "1"),
			holding(high, "1"),
			holding(guaranteed("holder-guaranteed", "100m", "50Mi"), "1"),
		)

		// More widgets than the node has: no set of pods frees enough.
		tooMany := holding(critical("critical-five-widgets", resources("10m", "10Mi")), "5")
		ex := e.explainDevices(tooMany, preempts)
		e.expectExplainedRefusal(ex, e.expectRefusedForDevices(e.create(tooMany)))
		e.expectVictims()

		// Two widgets short, nothing else.
		two := holding(critical("critical-two-widgets", resources("100m", "100Mi")), "2")
		e.expectDevicePreemption(two, widget, preempts, allocated)

		// One widget short, and cpu: on the stock kubelet and the
		// defaults the same four holders are still there.
		free := e.freeCPU()
		free.Add(resource.MustParse("150m"))
		cpu := holding(critical("critical-widget-and-cpu", v1.ResourceList{v1.ResourceCPU: free, v1.ResourceMemory: resource.MustParse("10Mi")}), "1")
		reasons := e.expectDevicePreemption(cpu, widget, preempts, allocated)
		if !strings.Contains(reasons, string(widget)) || !strings.Contains(reasons, "cpu") {
			e.t.Errorf("upstream's shortfall for the last critical pod is %q, want widgets and cpu both short", reasons)
		}
		if !preempts {
			for _, h := range holders {
				e.expectPhase(h, v1.PodRunning)
			}
			e.expectVictims()
		}
		for _, s := range []podSpec{tooMany, two, cpu} {
			p, err := e.get(s.pod(e.node))
			if err != nil {
				e.t.Fatalf("getting %s: %v", s.name, err)
			}
			want := 0
			if skips {
				want = 1
				e.waitEvent([]*v1.Pod{p}, "DevicePreemptionSkipped", 30*time.Second) // events are sent after the status
			}
			if got := e.eventCount(p, "DevicePreemptionSkipped"); got != want {
				e.t.Errorf("%s: %d DevicePreemptionSkipped events, want %d", s.name, got, want)
			}
		}
	})
}

// holdingDevices is s requesting n of resource, as a pod that ignores
// SIGTERM, so that once killed it takes its whole grace period.
func holdingDevices(s podSpec, res v1.ResourceName, n string, grace int64) podSpec {
	s.requests, s.limits = maps.Clone(s.requests), maps.Clone(s.limits)
	if s.requests == nil {
		s.requests = v1.ResourceList{}
	}
	if s.limits == nil {
		s.limits = v1.ResourceList{}
	}
	s.requests[res], s.limits[res] = resource.MustParse(n), resource.MustParse(n)
	s.command = []string{"/bin/sh", "-c", "trap '' TERM; while true; do sleep 1; done"}
	s.gracePeriod = ptr.To(grace)
	return s
}

// A critical pod whose victim has a 120 s grace period, and takes 45 s of
// it to shut down, is held while it terminates, and the kubelet goes on
// meanwhile: another pod is created, runs and is deleted, a second
// critical pod short of the device is held and its deletion completes at
// once, all before the victim has stopped, and /healthz answers ok every
// second. A kubelet whose sync loop waited on the kill could admit
// neither before the victim stopped. (The stock kubelet kills nothing for
// devices: critlet's setting only.) The critical pod runs once the victim
// is gone, on its widget, with no status before.
func TestDevicePreemptionLongGrace(t *testing.T) {
	const widget = v1.ResourceName("critlet.example/widget")
	const grace, shutdown = 120, 45
	opts := scenarioOptions{critletOnly: []kubeletUnderTest{devicePreempting}, timeout: 10 * time.Minute}
	runScenario(t, "6b device victims' long grace", opts, func(e *env) {
		e.startDevicePlugin(string(widget), "widget-0", "widget-1")
		e.waitAllocatable(widget, 2)
		// The other widget's holder is critical, no candidate: the victim
		// is the slow one, whose widget the critical pod must get.
		slow := holdingDevices(bestEffort("holder-slow"), widget, "1", grace)
		slow.command = []string{"/bin/sh", "-c", fmt.Sprintf("trap 'sleep %d; exit 0' TERM; while true; do sleep 1; done", shutdown)}
		victim := e.createRunning(slow, holdingDevices(critical("critical-kept", resources("10m", "10Mi")), widget, "1", 1))[0]
		held := e.deviceHolders(widget)[victim.Name]
		start := time.Now()
		crit := e.create(holdingDevices(critical("critical-widget", resources("10m", "10Mi")), widget, "1", 1))
		// The victim's status says Failed only once it has stopped: its
		// event says its kill has begun.
		e.waitEvent([]*v1.Pod{victim}, reasonPreempting, 30*time.Second)
		signalled := time.Since(start)

		// Meanwhile: the kubelet answers, admits, starts and deletes. (Its
		// /healthz fails only after a sync loop stalled for 5 min: the
		// bystander is what shows the sync loop going on.)
		healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", suite.Config().Ports.KubeletHealthz)
		stop := make(chan struct{})
		var stopOnce sync.Once
		stopProbe := func() { stopOnce.Do(func() { close(stop) }) }
		e.t.Cleanup(stopProbe)
		failures := make(chan string, 1000)
		go func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					close(failures)
					return
				case <-time.After(time.Second):
				}
				resp, err := client.Get(healthz)
				if err != nil {
					failures <- err.Error()
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failures <- resp.Status
				}
			}
		}()
		creating := time.Now()
		bystander := e.createRunning(bestEffort("bystander"))[0]
		if took := time.Since(creating); took > time.Minute {
			e.t.Errorf("the bystander took %s to run while the victim terminated, want under a minute", took)
		}
		e.deleteAndWait(bystander)
		// Another critical pod short of the widget waits for the same
		// victim (one preemption at a time); deleted, it is gone at once.
		second := e.create(holdingDevices(critical("critical-second", resources("10m", "10Mi")), widget, "1", 1))
		e.waitEvent([]*v1.Pod{second}, "WaitingForPreemptedPods", 30*time.Second)
		deleting := time.Now()
		e.deleteAndWait(second)
		deleted := time.Since(deleting)
		if deleted > 30*time.Second {
			e.t.Errorf("the held critical pod took %s to be deleted, want seconds", deleted)
		}
		if got := e.victims(); len(got) != 0 || e.eventCount(victim, reasonPreempting) != 1 {
			e.t.Errorf("the second critical pod preempted %v (victim's Preempting events: %d), want nothing more", got, e.eventCount(victim, reasonPreempting))
		}
		if cur, err := e.get(crit); err != nil || cur.Status.Phase != v1.PodPending || len(cur.Status.ContainerStatuses) != 0 {
			e.t.Errorf("critical pod while its victim terminates: %v %+v, want Pending with no container", err, cur.Status)
		}
		during := time.Since(start)
		stopProbe()
		var bad []string
		for f := range failures {
			bad = append(bad, f)
		}
		if len(bad) > 0 {
			e.t.Errorf("/healthz failed %d times while the victim terminated: %v", len(bad), bad)
		}
		if during >= shutdown*time.Second {
			e.t.Errorf("the bystander and the second critical pod took %s, past the victim's %ds shutdown: the sync loop may have waited on it", during, shutdown)
		}
		e.note("victim signalled %s after the critical pod's creation; bystander created, running and deleted, a second held critical pod deleted in %s, by %s, /healthz ok throughout",
			signalled.Round(time.Second), deleted.Round(100*time.Millisecond), during.Round(time.Second))

		crit = e.waitPhase(crit, (grace+60)*time.Second, v1.PodRunning)
		e.row.latency = time.Since(start)
		e.row.victims = e.waitVictims("holder-", 1, 0)
		e.expectPreempted(victim, exitsOnTerm)
		if now := e.deviceHolders(widget)[crit.Name]; !slices.Equal(now, held) {
			e.t.Errorf("critical pod runs on %v, want the victim's %v", now, held)
		}
		if e.row.latency < shutdown*time.Second {
			e.t.Errorf("critical pod ran %s after its creation, before its victim's %ds shutdown could end", e.row.latency, shutdown)
		}
		e.note("critical pod ran %s after its creation", e.row.latency.Round(time.Second))
	})
}

// Victims are credited with the healthy devices they hold, init
// containers' included. Six widgets, all held by pods ignoring SIGTERM: a
// BestEffort pod whose widget the plugin then reports unhealthy, a
// Burstable pod whose init container took two widgets and whose container
// uses one of them (the pod holds both until it ends), a smaller Burstable
// pod with one, a Guaranteed pod with two. A critical pod short of one
// widget preempts the small Burstable pod, never the BestEffort one alone
// (its kill would free nothing allocatable); a second, short of two,
// preempts the pod with the init container, whose two widgets it then runs
// on. (Credited by request, the first would preempt only the BestEffort
// pod; with the init container's widgets not counted, the second would
// take the Guaranteed pod.) critlet's setting only: the stock kubelet
// kills nothing for devices.
func TestDeviceVictimsCreditedWithHeldDevices(t *testing.T) {
	const widget = v1.ResourceName("critlet.example/widget")
	opts := scenarioOptions{critletOnly: []kubeletUnderTest{devicePreempting}, timeout: 8 * time.Minute}
	runScenario(t, "6c device victims' held devices", opts, func(e *env) {
		plugin := e.startDevicePlugin(string(widget), "widget-0", "widget-1", "widget-2", "widget-3", "widget-4", "widget-5")
		e.waitAllocatable(widget, 6)
		sick := e.createRunning(holdingDevices(bestEffort("holder-sick"), widget, "1", 1))[0]
		plugin.reportUnhealthy(e.deviceHolders(widget)[sick.Name]...)
		e.waitAllocatable(widget, 5)
		withInit := holdingDevices(burstable("holder-init", "100m", "100Mi"), widget, "1", 1)
		withInit.initResources = v1.ResourceList{widget: resource.MustParse("2")}
		kept := e.createRunning(withInit,
			holdingDevices(burstable("holder-small", "100m", "50Mi"), widget, "1", 1),
			holdingDevices(guaranteed("holder-guaranteed", "100m", "50Mi"), widget, "2", 1))
		held := e.deviceHolders(widget)
		if n := len(held["holder-init"]); n != 2 {
			e.t.Fatalf("the pod with the init container holds widgets %v, want 2", held["holder-init"])
		}

		start := time.Now()
		for _, step := range []struct {
			name, widgets, victim string
		}{
			{"critical-one-widget", "1", "holder-small"},
			{"critical-two-widgets", "2", "holder-init"},
		} {
			crit := e.create(holdingDevices(critical(step.name, resources("10m", "10Mi")), widget, step.widgets, 1))
			crit = e.waitPhase(crit, 2*time.Minute, v1.PodRunning)
			if got := e.deviceHolders(widget)[crit.Name]; !slices.Equal(got, held[step.victim]) {
				e.t.Errorf("%s runs on widgets %v, want %s's %v", crit.Name, got, step.victim, held[step.victim])
			}
		}
		e.row.latency = time.Since(start)
		e.expectVictims("holder-init", "holder-small")
		for _, p := range []*v1.Pod{sick, kept[2]} {
			e.expectPhase(p, v1.PodRunning)
		}
		e.note("unhealthy widget %v spared with its holder; both critical pods ran in %s", held[sick.Name], e.row.latency.Round(time.Second))
	})
}

var (
	devicePreempting = critletKubelet.with([]string{"--critical-preemption-devices"}, nil)
	// The setting on a node that aligns devices to NUMA nodes: it never
	// preempts for them there.
	devicePreemptingSingleNUMA = critletKubelet.with([]string{"--critical-preemption-devices", "--topology-manager-policy=single-numa-node"}, nil)
)

// expectDevicePreemption creates the critical pod s, short of devices of
// resource, and checks the outcome: with preempts, exactly the victims
// upstream's handler chooses for the node's shortfall (devices and native
// resources together), each ending Failed/Preempting with DisruptionTarget,
// and the critical pod running on the devices they held; without, refused
// as upstream refuses it and nothing preempted. critlet-explain, asked
// live before, must say the same: the same victims, or the same refusal.
// It returns upstream's shortfall.
func (e *env) expectDevicePreemption(s podSpec, resource v1.ResourceName, preempts bool, allocated func() []string) string {
	e.t.Helper()
	node, err := e.c.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting node: %v", err)
	}
	before := e.victims()
	active := e.activePods()
	want, reasons, err := prediction.StockVictims(node, active, s.pod(e.node))
	if err != nil {
		e.t.Fatalf("upstream's choice for %s: %v", s.name, err)
	}
	e.note("%s: upstream's shortfall %s, its victims %v", s.name, reasons, want)
	ex := e.explainDevices(s, preempts)
	if !preempts {
		e.expectExplainedRefusal(ex, e.expectRefusedForDevices(e.create(s)))
		if got := e.victims(); !slices.Equal(got, before) {
			e.t.Errorf("preempted %v for %s, want nothing more than %v", got, s.name, before)
		}
		return reasons
	}
	held := e.deviceHolders(resource)
	crit := e.createCritical(s)
	got := e.waitVictims("holder-", len(before)+len(want), 3*time.Second)
	e.row.victims = got
	var fresh, freed []string
	for _, name := range got {
		if !slices.Contains(before, name) {
			fresh = append(fresh, name)
		}
	}
	sort.Strings(want)
	if !slices.Equal(fresh, want) {
		e.t.Errorf("%s preempted %v, want upstream's choice %v", s.name, fresh, want)
	}
	var explained []string
	if ex.Verdict == explain.AdmittedAfterPreemption && len(ex.Policies) == 1 {
		for _, v := range ex.Policies[0].Victims {
			explained = append(explained, v.Name)
			if v.Devices[string(resource)] != int64(len(held[v.Name])) {
				e.t.Errorf("critlet-explain: victim %s holds %d %s, the device manager says %v", v.Name, v.Devices[string(resource)], resource, held[v.Name])
			}
		}
	}
	sort.Strings(explained)
	if ex.Verdict != explain.AdmittedAfterPreemption || !slices.Equal(explained, fresh) {
		e.t.Errorf("critlet-explain said %s (%s) with victims %v; the kubelet preempted %v", ex.Verdict, ex.Message, explained, fresh)
	}
	for _, p := range active {
		switch {
		case slices.Contains(fresh, p.Name):
			e.expectPreempted(p, killed)
			freed = append(freed, held[p.Name]...)
		case strings.HasPrefix(p.Name, "holder-") || strings.HasPrefix(p.Name, "critical-"):
			e.expectPhase(p, v1.PodRunning)
		}
	}
	now := e.deviceHolders(resource)[crit.Name]
	sort.Strings(freed)
	if !slices.Equal(now, freed) {
		e.t.Errorf("%s runs on %s %v, want the victims' %v (the plugin allocated %v)", s.name, resource, now, freed, allocated())
	}
	e.note("%s: ran on %v, freed by %v", s.name, now, fresh)
	return reasons
}

// explainDevices asks critlet-explain about s, as the kubelet under test
// would admit it: with --critical-preemption-devices when it preempts for
// devices, under its policy (upstream's).
func (e *env) explainDevices(s podSpec, preempts bool) *explain.Explanation {
	e.t.Helper()
	var flags []string
	if preempts {
		flags = append(flags, "--critical-preemption-devices")
	}
	ex := e.explainLive(s, "upstream", flags...)
	e.note("%s: critlet-explain %s", s.name, ex.Verdict)
	return ex
}

// expectExplainedRefusal checks that critlet-explain refused the pod the
// kubelet refused, with the kubelet's reason and admission message (which
// the kubelet's rejectPod writes after "Pod was rejected: ").
func (e *env) expectExplainedRefusal(ex *explain.Explanation, refused *v1.Pod) {
	e.t.Helper()
	if ex.Verdict != explain.Rejected || ex.Reason != refused.Status.Reason || "Pod was rejected: "+ex.Message != refused.Status.Message {
		e.t.Errorf("critlet-explain said %s %s %q for %s; the kubelet: %s %q", ex.Verdict, ex.Reason, ex.Message, refused.Name, refused.Status.Reason, refused.Status.Message)
	}
}

// expectRefusedForDevices waits for p to end, checks that it was refused
// as the device manager refuses a pod short of devices, and returns it.
func (e *env) expectRefusedForDevices(p *v1.Pod) *v1.Pod {
	e.t.Helper()
	cur := e.waitPhase(p, 2*time.Minute, v1.PodRunning, v1.PodFailed, v1.PodSucceeded)
	e.note("%s: %s %s", p.Name, cur.Status.Phase, cur.Status.Reason)
	if cur.Status.Phase != v1.PodFailed || cur.Status.Reason != "UnexpectedAdmissionError" ||
		!strings.Contains(cur.Status.Message, "requested number of devices unavailable") {
		e.t.Errorf("critical pod %s short of devices: %s %q (%s), want Failed UnexpectedAdmissionError, the device manager's refusal", p.Name, cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
	}
	return cur
}

// waitAllocatable waits until the node advertises n of resource.
func (e *env) waitAllocatable(resource v1.ResourceName, n int64) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := e.c.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q := node.Status.Allocatable[resource]
		return q.Value() == n, nil
	})
	if err != nil {
		e.t.Fatalf("the node never advertised %d %s: %v", n, resource, err)
	}
}

// freeCPU is the node's allocatable cpu less what its active pods request.
func (e *env) freeCPU() resource.Quantity {
	e.t.Helper()
	free := e.allocatable()[v1.ResourceCPU]
	for _, p := range e.activePods() {
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		free.Sub(req[v1.ResourceCPU])
	}
	return free
}

// deviceHolders reads the device manager's checkpoint: the sorted IDs of
// resource each pod of the node holds, by pod name.
func (e *env) deviceHolders(resource v1.ResourceName) map[string][]string {
	e.t.Helper()
	mgr, err := checkpointmanager.NewCheckpointManager(suite.Config().DevicePluginDir())
	if err != nil {
		e.t.Fatalf("opening the device manager's checkpoint: %v", err)
	}
	cp := devicecheckpoint.New(nil, nil)
	if err := mgr.GetCheckpoint(deviceManagerCheckpoint, cp); err != nil {
		e.t.Fatalf("reading the device manager's checkpoint: %v", err)
	}
	entries, _ := cp.GetData()
	byUID := map[string]string{}
	for _, p := range e.activePods() {
		byUID[string(p.UID)] = p.Name
		// A static pod's UID is its mirror pod's annotation.
		if uid := p.Annotations[kubetypes.ConfigMirrorAnnotationKey]; uid != "" {
			byUID[uid] = p.Name
		}
	}
	out := map[string][]string{}
	for _, en := range entries {
		name, ok := byUID[en.PodUID]
		if !ok || en.ResourceName != string(resource) {
			continue
		}
		out[name] = append(out[name], sets.List(en.DeviceIDs.Devices())...)
	}
	for name := range out {
		sort.Strings(out[name])
		out[name] = slices.Compact(out[name])
	}
	return out
}

// deviceManagerCheckpoint is the file, in the device-plugin directory, the
// kubelet's device manager keeps its allocations in.
const deviceManagerCheckpoint = "kubelet_internal_checkpoint"

// Five victims that ignore SIGTERM, each with a 5 s grace period: the
// kubelet must wait out each grace period before SIGKILL. Stock terminates
// them one after another: each termination begins once the one before has
// ended. critlet terminates them in parallel: every termination begins
// before the first one ends, and all end within one grace period of each
// other. A termination begins when the victim receives SIGTERM (its own
// record, to 10 ms: a kubelet that recorded every Preempting event first
// and then killed one victim at a time would still be seen as sequential)
// and ends when its container exits (the runtime's FinishedAt, in whole
// seconds). The create→Running time is reported.
func TestTerminationLatency(t *testing.T) {
	const grace = 5
	runScenario(t, "7 five victims ignoring SIGTERM", scenarioOptions{}, func(e *env) {
		w := e.newWitness()
		var specs []podSpec
		var names []string
		for i := 0; i < 5; i++ {
			s := w.witnessed(burstable(fmt.Sprintf("stubborn-%d", i), "100m", "100Mi"), grace)
			specs = append(specs, s)
			names = append(names, s.name)
		}
		pods := e.createRunning(specs...)
		e.createCritical(critical("critical", e.allocatable()))
		var spans []termination
		for _, p := range pods {
			// SIGKILL after the grace period: exit 137, so Failed.
			e.expectPreempted(p, killed)
			spans = append(spans, e.terminationOf(w, p))
		}
		e.expectVictims(names...)
		e.expectTerminationsOverlap(spans, !e.kubelet.stock(), grace*time.Second)
	})
}

// termination is when a victim's termination began and ended.
type termination struct {
	pod        string
	begun, end time.Time
}

// terminationOf reads a preempted pod's termination: begun at the one
// SIGTERM it received, ended at its container's exit.
func (e *env) terminationOf(w *witness, p *v1.Pod) termination {
	e.t.Helper()
	cur, err := e.get(p)
	if err != nil {
		e.t.Fatalf("getting %s: %v", p.Name, err)
	}
	r := e.expectStartedOnceByRuntime(w, p)
	if len(r.sigterms) != 1 || len(cur.Status.ContainerStatuses) != 1 || cur.Status.ContainerStatuses[0].State.Terminated == nil {
		e.t.Fatalf("victim %s: %d SIGTERMs received, container status %+v: cannot time its termination", p.Name, len(r.sigterms), cur.Status.ContainerStatuses)
	}
	return termination{pod: p.Name, begun: r.sigterms[0], end: cur.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time}
}

// expectTerminationsOverlap checks that every termination began before the
// first one ended and all ended within grace of each other (parallel), or
// that each began no earlier than the one before it ended (one after
// another).
func (e *env) expectTerminationsOverlap(spans []termination, parallel bool, grace time.Duration) {
	e.t.Helper()
	sort.Slice(spans, func(i, j int) bool { return spans[i].begun.Before(spans[j].begun) })
	origin := spans[0].begun
	var desc []string
	firstEnd, lastEnd := spans[0].end, spans[0].end
	for _, s := range spans {
		desc = append(desc, fmt.Sprintf("%s %s–%s", s.pod, s.begun.Sub(origin).Round(10*time.Millisecond), s.end.Sub(origin).Round(10*time.Millisecond)))
		if s.end.Before(firstEnd) {
			firstEnd = s.end
		}
		if s.end.After(lastEnd) {
			lastEnd = s.end
		}
	}
	e.note("terminations (SIGTERM–exit, from the first SIGTERM): %s", strings.Join(desc, ", "))
	for i, s := range spans {
		switch {
		case parallel && !s.begun.Before(firstEnd):
			e.t.Errorf("%s's termination began %s after the first one ended: want all in parallel", s.pod, s.begun.Sub(firstEnd))
		case !parallel && i > 0 && s.begun.Before(spans[i-1].end):
			e.t.Errorf("%s's termination began before %s's ended: the stock kubelet terminates one after another", s.pod, spans[i-1].pod)
		}
	}
	if parallel && lastEnd.Sub(firstEnd) >= grace {
		e.t.Errorf("terminations ended %s apart, want within one grace period (%s) of each other", lastEnd.Sub(firstEnd), grace)
	}
}

// A victim the runtime cannot stop: its pod runs under a runtime handler
// whose runc refuses "kill", so StopContainer fails and the kubelet's kill
// times out (ExceededGracePeriod). Upstream logs the failure and admits the
// critical pod anyway, and so does critlet with its default settings. With
// re-planning turned on, critlet first chooses other, untried pods for the
// shortfall: the stuck pod freed nothing.
func TestUnkillableVictim(t *testing.T) {
	replanning := critletKubelet.with([]string{"--critical-preemption-max-replans=2"}, nil)
	runScenario(t, "8 victim that cannot be killed", scenarioOptions{critletVariants: []kubeletUnderTest{replanning}}, func(e *env) {
		stuck, spares, crit := e.admitPastStuckVictim(burstable("spare-0", "100m", "100Mi"), burstable("spare-1", "100m", "100Mi"))
		pods := append([]*v1.Pod{stuck}, spares...)
		// The kubelet publishes a victim's DisruptionTarget condition with its
		// terminal status, once its containers have stopped: never, here.
		if e.kubelet.name == replanning.name {
			e.expectPreemptorEvent(crit, "PreemptionReplanned")
			for _, p := range pods[1:] {
				e.expectPreempted(p, exitsOnTerm)
			}
			e.expectVictims(pods[1].Name, pods[2].Name)
			e.note("re-planned onto the two spare pods for the stuck pod's share")
		} else {
			e.expectPreemptorEvent(crit, "PreemptionIncomplete")
			for _, p := range pods[1:] {
				e.expectPhase(p, v1.PodRunning)
			}
			e.expectVictims()
			e.note("the kill timed out; the critical pod was admitted while the stuck pod still holds its requests")
		}
		e.row.victims = append(e.row.victims, pods[0].Name+" (kill timed out)")
	})
}

// The priority policy, set by flag and by environment variable, reaches the
// handler of a running kubelet: of a high-priority Burstable pod and a
// priority-0 Guaranteed pod of the same size, upstream's rules (and critlet's
// defaults) take the Burstable one; the priority policy takes the
// Guaranteed one, whose priority is lower.
func TestPriorityPolicy(t *testing.T) {
	byFlag := critletKubelet.with([]string{"--critical-preemption-policy=priority"}, nil)
	byEnv := critletKubelet.with(nil, []string{"CRITLET_PREEMPTION_POLICY=priority"})
	runScenario(t, "10 priority policy", scenarioOptions{critletVariants: []kubeletUnderTest{byFlag, byEnv}}, func(e *env) {
		e.priorityPolicy(e.kubelet.name == byFlag.name || e.kubelet.name == byEnv.name)
	})
}

// priorityPolicy runs scenario 10 on the node: the victim is the
// Burstable pod under upstream's rules, the Guaranteed one under the
// priority policy.
func (e *env) priorityPolicy(byPriority bool) {
	e.t.Helper()
	e.ensurePriorityClass("e2e-high", 1_000_000_000)
	high := burstable("high-burstable", "200m", "200Mi")
	high.priorityClass = "e2e-high"
	pods := e.createRunning(high, guaranteed("low-guaranteed", "200m", "200Mi"))
	all := e.allocatable()
	cpu, mem := all[v1.ResourceCPU], all[v1.ResourceMemory]
	cpu.Sub(resource.MustParse("200m"))
	mem.Sub(resource.MustParse("200Mi"))
	crit := e.createCritical(critical("critical", v1.ResourceList{v1.ResourceCPU: cpu, v1.ResourceMemory: mem}))
	policy := "upstream"
	victim, survivor := pods[0], pods[1]
	if byPriority {
		policy, victim, survivor = "priority", pods[1], pods[0]
	}
	e.expectPreempted(victim, exitsOnTerm)
	e.expectPhase(survivor, v1.PodRunning)
	e.expectVictims(victim.Name)
	e.expectPhase(crit, v1.PodRunning)
	if !e.kubelet.stock() {
		e.expectPreemptorEvent(crit, "PreemptedForAdmission")
		e.expectSettingsLogged("--critical-preemption-policy=" + policy)
	}
}

// startDevicePlugin serves devices of resource with upstream's device-plugin
// stub (the one upstream's node e2e uses), registered with the node's
// kubelet, until the scenario ends.
func (e *env) startDevicePlugin(resource string, ids ...string) *devicePlugin {
	e.t.Helper()
	p := e.runDevicePlugin(resource, ids...)
	e.t.Cleanup(p.stop)
	return p
}

// devicePlugin is a running device-plugin stub: allocated lists the device
// IDs the kubelet's Allocate calls asked for; stop stops the plugin (its
// socket removed, as a plugin that exits leaves it), once.
type devicePlugin struct {
	e    *env
	stub *devicepluginstub.Stub
	ids  []string
	mu   sync.Mutex
	got  []string
	once sync.Once
}

func (p *devicePlugin) allocated() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

func (p *devicePlugin) stop() {
	p.once.Do(func() {
		if err := p.stub.Stop(klog.Background()); err != nil {
			p.e.t.Errorf("stopping the device plugin: %v", err)
		}
	})
}

// reportUnhealthy has the plugin list its devices again, those in
// unhealthy as Unhealthy, as a plugin does when a device fails.
func (p *devicePlugin) reportUnhealthy(unhealthy ...string) {
	var devs []*pluginapi.Device
	for _, id := range p.ids {
		health := pluginapi.Healthy
		if slices.Contains(unhealthy, id) {
			health = pluginapi.Unhealthy
		}
		devs = append(devs, &pluginapi.Device{ID: id, Health: health})
	}
	p.stub.Update(devs)
}

// runDevicePlugin starts upstream's device-plugin stub offering ids of
// resource, healthy, and registers it with the kubelet.
func (e *env) runDevicePlugin(resource string, ids ...string) *devicePlugin {
	e.t.Helper()
	dir := suite.Config().DevicePluginDir()
	var devs []*pluginapi.Device
	for _, id := range ids {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	// The kubelet's socket, as the host sees its device-plugin directory.
	kubeletSock := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	e.waitKubeletRegistration(kubeletSock)
	p := &devicePlugin{e: e, ids: slices.Clone(ids)}
	p.stub = devicepluginstub.NewDevicePluginStub(klog.Background(), devs, filepath.Join(dir, "critlet-e2e.sock"), resource, false, false)
	p.stub.SetAllocFunc(func(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
		resp := &pluginapi.AllocateResponse{}
		for _, c := range r.ContainerRequests {
			p.mu.Lock()
			p.got = append(p.got, c.DevicesIds...)
			p.mu.Unlock()
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
		}
		return resp, nil
	})
	if err := p.stub.Start(e.ctx); err != nil {
		e.t.Fatalf("starting the device plugin: %v", err)
	}
	if err := p.stub.Register(e.ctx, kubeletSock, resource, dir); err != nil {
		p.stop()
		e.t.Fatalf("registering the device plugin: %v", err)
	}
	return p
}

// waitKubeletRegistration waits until a kubelet accepts connections on its
// device-plugin registration socket, as a plugin watching that socket
// registers: a starting kubelet's device manager first empties the
// directory, and a plugin socket made before that is removed under the
// plugin (the kubelet then cannot dial it back). Once the socket accepts a
// connection the emptying is over.
func (e *env) waitKubeletRegistration(sock string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return false, nil
		}
		return true, c.Close()
	})
	if err != nil {
		e.t.Fatalf("the kubelet's device-plugin registration socket %s: %v", sock, err)
	}
}

func (e *env) ensureRuntimeClass(handler string) {
	e.t.Helper()
	_, err := e.c.NodeV1().RuntimeClasses().Create(e.ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: handler}, Handler: handler}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("creating RuntimeClass %s: %v", handler, err)
	}
}

// A kubelet restart right after the critical pod is admitted must not
// preempt anything again nor disturb the critical pod: the victims are
// terminal in the API and the critical pod now fits.
func TestKubeletRestart(t *testing.T) {
	runScenario(t, "9 kubelet restart after admission", scenarioOptions{}, func(e *env) {
		be, bu, gu := e.upstreamFillers(false)
		crit := e.createCritical(critical("critical", e.allocatable()))
		before := crit.Status.ContainerStatuses[0].ContainerID
		e.restartKubelet()
		e.settle(15 * time.Second) // a few pod syncs and status updates
		cur := e.expectPhase(crit, v1.PodRunning)
		if len(cur.Status.ContainerStatuses) != 1 || cur.Status.ContainerStatuses[0].ContainerID != before || cur.Status.ContainerStatuses[0].RestartCount != 0 {
			e.t.Errorf("critical pod's container changed across the restart: before %s, after %+v", before, cur.Status.ContainerStatuses)
		}
		e.expectPhase(be, v1.PodRunning)
		e.expectPreempted(bu, exitsOnTerm) // still exactly one Preempting event each
		e.expectPreempted(gu, exitsOnTerm)
		e.expectVictims(bu.Name, gu.Name)
	})
}

// expectPreemptorEvent checks the critical pod's own admission event:
// critlet records exactly one, with reason; upstream records none.
func (e *env) expectPreemptorEvent(crit *v1.Pod, reason string) {
	e.t.Helper()
	var ours int
	for _, r := range []string{"PreemptedForAdmission", "PreemptionReplanned", "PreemptionIncomplete", "PreemptionImpossible"} {
		ours += e.eventCount(crit, r)
	}
	want := 0
	if !e.kubelet.stock() {
		want = 1
		if n := e.eventCount(crit, reason); n != 1 {
			e.t.Errorf("critical pod has %d %s events, want 1", n, reason)
		}
	}
	if ours != want {
		e.t.Errorf("critical pod has %d admission events, want %d", ours, want)
	}
}

func (e *env) ensurePriorityClass(name string, value int32) {
	e.t.Helper()
	_, err := e.c.SchedulingV1().PriorityClasses().Create(e.ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("creating PriorityClass %s: %v", name, err)
	}
	// The Priority admission plugin reads classes from its informer: a pod
	// naming a class created a moment ago can be refused. Wait until a
	// dry-run pod of the class is admitted.
	probe := bestEffort("priority-class-probe")
	probe.priorityClass = name
	var last error
	err = wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod := probe.pod(e.node)
		_, last = e.c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		e.t.Fatalf("PriorityClass %s never admitted a pod: %v", name, last)
	}
}
