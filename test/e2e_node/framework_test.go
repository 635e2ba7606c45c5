//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/critlet/critlet/internal/localnode"
	"github.com/critlet/critlet/test/prediction"
	"github.com/critlet/critlet/test/testenv"
)

// testNamespace holds the scenarios' non-critical pods; critical ones go to
// kube-system, as upstream's node e2e puts them.
const testNamespace = "e2e"

// Reasons and messages the kubelet uses; they are upstream's API, so the
// tests name them rather than importing kubelet internals.
const configSourceKey = "kubernetes.io/config.source"

// result is one row of the report.
type result struct {
	scenario, kubelet string
	failed            bool
	victims           []string
	latency           time.Duration // critical pod create → Running; 0 if not measured
	notes             []string
	phases            map[string]v1.PodPhase // victims' final phases, where checked
}

func (r *result) recordPhase(pod string, phase v1.PodPhase) {
	if r.phases == nil {
		r.phases = map[string]v1.PodPhase{}
	}
	r.phases[pod] = phase
}

type resultTable struct {
	mu   sync.Mutex
	rows []*result
}

var results resultTable

func (r *resultTable) add(row *result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, row)
}

func (r *resultTable) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("| scenario | kubelet | result | victims | critical pod create→Running | notes |\n|---|---|---|---|---|---|\n")
	for _, row := range r.rows {
		status := "pass"
		if row.failed {
			status = "FAIL"
		}
		lat := "–"
		if row.latency > 0 {
			lat = row.latency.Round(10 * time.Millisecond).String()
		}
		v := "none"
		if len(row.victims) > 0 {
			named := make([]string, len(row.victims))
			for i, name := range row.victims {
				named[i] = name
				if ph, ok := row.phases[name]; ok {
					named[i] += " (" + string(ph) + ")"
				}
			}
			v = fmt.Sprintf("%d: %s", len(row.victims), strings.Join(named, ", "))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", row.scenario, row.kubelet, status, v, lat, strings.Join(row.notes, "; "))
	}
	return b.String()
}

// env is one scenario's run on a fresh node with one kubelet.
type env struct {
	t       *testing.T
	ctx     context.Context
	c       kubernetes.Interface
	node    string
	kubelet kubeletUnderTest
	row     *result
	maxPods int32
	flags   []string
}

// scenarioOptions configure the kubelet a scenario starts.
type scenarioOptions struct {
	maxPods int32
	// critletVariants are runs of critlet's kubelet with non-default
	// settings, after the default kubelets, when critlet is selected.
	critletVariants []kubeletUnderTest
	// timeout bounds each kubelet's run; 8 minutes when zero.
	timeout time.Duration
	// critletOnly replaces the default kubelets with these critlet kubelets
	// (run when critlet is selected).
	critletOnly []kubeletUnderTest
	// kubeletFlags are upstream kubelet flags the scenario needs on every
	// kubelet it runs.
	kubeletFlags []string
}

// runScenario runs fn once per kubelet, each time on a fresh node.
func runScenario(t *testing.T, name string, opts scenarioOptions, fn func(e *env)) {
	runs := kubelets()
	if opts.critletOnly != nil {
		runs = nil
	}
	if slices.Contains(selected(), critletKubelet.name) {
		runs = append(runs, opts.critletVariants...)
		runs = append(runs, opts.critletOnly...)
	}
	if len(runs) == 0 {
		// A skip when asked for by -kubelets, a failure under make test.
		testenv.Need(t, "scenario "+name, fmt.Errorf("no run for -kubelets=%s", *only))
	}
	for _, k := range runs {
		t.Run(k.name, func(t *testing.T) {
			row := &result{scenario: name, kubelet: k.name}
			results.add(row)
			t.Cleanup(func() { row.failed = t.Failed() })
			timeout := opts.timeout
			if timeout == 0 {
				timeout = 8 * time.Minute
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			e := &env{t: t, ctx: ctx, c: suite.Client(), node: suite.Config().NodeName, kubelet: k, row: row, maxPods: opts.maxPods,
				flags: append(append(slices.Clip(k.flags), opts.kubeletFlags...), strings.Fields(*extra)...)}
			e.freshNode()
			defer e.dumpOnFailure()
			fn(e)
		})
	}
}

// freshNode replaces the kubelet with a new one of the scenario's kind, on
// an empty node.
func (e *env) freshNode() {
	e.t.Helper()
	start := time.Now()
	if err := suite.ResetKubelet(e.ctx); err != nil {
		e.t.Fatalf("resetting the node: %v", err)
	}
	suite.SetKubelet(e.kubelet.path(), e.flags, e.kubelet.env, e.maxPods)
	if err := suite.StartKubelet(e.ctx); err != nil {
		e.t.Fatalf("starting %s kubelet: %v", e.kubelet.name, err)
	}
	if _, err := e.c.CoreV1().Namespaces().Create(e.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("creating namespace: %v", err)
	}
	e.t.Logf("fresh node with the %s kubelet Ready in %s", e.kubelet.name, time.Since(start).Round(time.Millisecond))
}

// restartKubelet stops the kubelet and starts it again on the same state,
// as a crash and a supervisor's restart would.
func (e *env) restartKubelet() {
	e.t.Helper()
	if err := suite.StopKubelet(); err != nil {
		e.t.Fatalf("stopping the kubelet: %v", err)
	}
	if err := suite.StartKubelet(e.ctx); err != nil {
		e.t.Fatalf("restarting the kubelet: %v", err)
	}
}

func (e *env) dumpOnFailure() {
	if !e.t.Failed() {
		return
	}
	pods, err := e.c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		e.t.Logf("pod %s/%s: phase=%s reason=%q message=%q", p.Namespace, p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	e.t.Logf("kubelet log: %s", suite.Config().LogFile(localnode.Kubelet))
}

func (e *env) note(format string, args ...any) {
	e.row.notes = append(e.row.notes, fmt.Sprintf(format, args...))
}

// allocatable returns the node's allocatable cpu and memory.
func (e *env) allocatable() v1.ResourceList {
	e.t.Helper()
	n, err := e.c.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting node: %v", err)
	}
	return v1.ResourceList{v1.ResourceCPU: n.Status.Allocatable[v1.ResourceCPU], v1.ResourceMemory: n.Status.Allocatable[v1.ResourceMemory]}
}

// podSpec is a pod bound to the node that runs the pause process, which
// exits 0 on SIGTERM.
type podSpec struct {
	name, namespace  string
	requests, limits v1.ResourceList
	podLevel         *v1.ResourceRequirements
	priorityClass    string
	priority         *int32
	annotations      map[string]string
	command          []string
	gracePeriod      *int64
	runtimeClass     string
	hostDir          string           // a host directory mounted at /witness (witness_test.go)
	restartPolicy    v1.RestartPolicy // Never when empty
	// stubbornSibling adds a container "stubborn" that ignores SIGTERM,
	// so that the pod's kill lasts its whole grace period.
	stubbornSibling bool
	// initResources, when set, adds an init container "init" that exits at
	// once, with these as its requests and limits.
	initResources v1.ResourceList
}

// stubbornName is the container stubbornSibling adds.
const stubbornName = "stubborn"

func (s podSpec) pod(node string) *v1.Pod {
	ns := s.namespace
	if ns == "" {
		ns = testNamespace
	}
	cmd := s.command
	if cmd == nil {
		cmd = []string{"/pause"}
	}
	restart := s.restartPolicy
	if restart == "" {
		restart = v1.RestartPolicyNever
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns, Annotations: s.annotations},
		Spec: v1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  ptr.To(false),
			RestartPolicy:                 restart,
			PriorityClassName:             s.priorityClass,
			Priority:                      s.priority,
			TerminationGracePeriodSeconds: s.gracePeriod,
			Resources:                     s.podLevel,
			RuntimeClassName:              runtimeClass(s.runtimeClass),
			// No cluster DNS runs here: with DNSDefault the pod takes the
			// node's resolver configuration (none) and the kubelet records
			// no MissingClusterDNS event.
			DNSPolicy: v1.DNSDefault,
			Containers: []v1.Container{{
				Name:            "c",
				Image:           localnode.BusyboxImage,
				ImagePullPolicy: v1.PullNever,
				Command:         cmd,
				Resources:       v1.ResourceRequirements{Requests: s.requests, Limits: s.limits},
			}},
		},
	}
	if s.hostDir != "" {
		p.Spec.Volumes = []v1.Volume{{Name: "witness", VolumeSource: v1.VolumeSource{
			HostPath: &v1.HostPathVolumeSource{Path: s.hostDir, Type: ptr.To(v1.HostPathDirectoryOrCreate)}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "witness", MountPath: "/witness"}}
	}
	if s.initResources != nil {
		p.Spec.InitContainers = []v1.Container{{
			Name:            "init",
			Image:           localnode.BusyboxImage,
			ImagePullPolicy: v1.PullNever,
			Command:         []string{"/bin/sh", "-c", "true"},
			Resources:       v1.ResourceRequirements{Requests: s.initResources, Limits: s.initResources},
		}}
	}
	if s.stubbornSibling {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{
			Name:            stubbornName,
			Image:           localnode.BusyboxImage,
			ImagePullPolicy: v1.PullNever,
			Command:         []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"},
		})
	}
	return p
}

// Builders of the three QoS classes, with upstream's sizes.
func bestEffort(name string) podSpec { return podSpec{name: name} }
func burstable(name, cpu, mem string) podSpec {
	return podSpec{name: name, requests: resources(cpu, mem)}
}
func guaranteed(name, cpu, mem string) podSpec {
	return podSpec{name: name, requests: resources(cpu, mem), limits: resources(cpu, mem)}
}

// critical is a system-node-critical pod in kube-system needing req, with
// the static-source annotation upstream's test sets.
func critical(name string, req v1.ResourceList) podSpec {
	return podSpec{
		name: name, namespace: metav1.NamespaceSystem, requests: req,
		priorityClass: "system-node-critical",
		annotations:   map[string]string{configSourceKey: "file"},
	}
}

func resources(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

func runtimeClass(name string) *string {
	if name == "" {
		return nil
	}
	return &name
}

func (e *env) create(s podSpec) *v1.Pod {
	e.t.Helper()
	p, err := e.c.CoreV1().Pods(s.pod(e.node).Namespace).Create(e.ctx, s.pod(e.node), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", s.name, err)
	}
	return p
}

// createRunning creates pods and waits until all run.
func (e *env) createRunning(specs ...podSpec) []*v1.Pod {
	e.t.Helper()
	var pods []*v1.Pod
	for _, s := range specs {
		pods = append(pods, e.create(s))
	}
	for i, p := range pods {
		pods[i] = e.waitPhase(p, 2*time.Minute, v1.PodRunning)
	}
	return pods
}

// createCritical creates a critical pod, waits for it to run, and reports
// the time from create to Running.
func (e *env) createCritical(s podSpec) *v1.Pod {
	e.t.Helper()
	start := time.Now()
	p := e.create(s)
	p = e.waitPhase(p, 3*time.Minute, v1.PodRunning)
	e.row.latency = time.Since(start)
	return p
}

func (e *env) get(p *v1.Pod) (*v1.Pod, error) {
	return e.c.CoreV1().Pods(p.Namespace).Get(e.ctx, p.Name, metav1.GetOptions{})
}

// waitPhase waits until p reaches one of phases, and fails the test if it
// reaches another terminal phase first.
func (e *env) waitPhase(p *v1.Pod, timeout time.Duration, phases ...v1.PodPhase) *v1.Pod {
	e.t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := e.get(p)
		if err != nil {
			return false, nil
		}
		last = cur
		for _, ph := range phases {
			if cur.Status.Phase == ph {
				return true, nil
			}
		}
		if cur.Status.Phase == v1.PodFailed || cur.Status.Phase == v1.PodSucceeded {
			return false, fmt.Errorf("pod reached %s (reason %q: %s)", cur.Status.Phase, cur.Status.Reason, cur.Status.Message)
		}
		return false, nil
	})
	if err != nil {
		phase := v1.PodPhase("unknown")
		if last != nil {
			phase = last.Status.Phase
		}
		e.t.Fatalf("pod %s/%s: waiting for %v: %v (last phase %s)", p.Namespace, p.Name, phases, err, phase)
	}
	return last
}

// expectPhase checks that p is in phase after the kubelet has had
// time to act on it.
func (e *env) expectPhase(p *v1.Pod, phase v1.PodPhase) *v1.Pod {
	e.t.Helper()
	cur, err := e.get(p)
	if err != nil {
		e.t.Fatalf("getting pod %s: %v", p.Name, err)
	}
	if cur.Status.Phase != phase {
		e.t.Errorf("pod %s/%s is %s (reason %q: %s), want %s", p.Namespace, p.Name, cur.Status.Phase, cur.Status.Reason, cur.Status.Message, phase)
	}
	return cur
}

// expectPreempted checks what the stock kubelet gives a preempted pod: the
// phase its containers' exits give (Succeeded for one that exits 0 on
// SIGTERM, as upstream's node e2e asserts, unless the status race
// checkVictimEnd names hits; Failed with reason Preempting for one killed
// after its grace period), the DisruptionTarget condition
// with reason TerminationByKubelet, and one Preempting event.
func (e *env) expectPreempted(p *v1.Pod, exit victimExit) {
	e.t.Helper()
	cur := e.expectTerminatedByPreemption(p, exit)
	if n := e.eventCount(cur, reasonPreempting); n != 1 {
		e.t.Errorf("preempted pod %s has %d %s events, want 1", p.Name, n, reasonPreempting)
	}
}

// expectTerminatedByPreemption checks a preempted pod's final phase and
// condition, as expectPreempted does, leaving its events to the caller.
func (e *env) expectTerminatedByPreemption(p *v1.Pod, exit victimExit) *v1.Pod {
	e.t.Helper()
	cur := e.waitEnded(e.waitPhase(p, 2*time.Minute, v1.PodSucceeded, v1.PodFailed), exit)
	switch note, err := checkVictimEnd(cur.Status, exit, !e.recovering()); {
	case err != nil:
		e.t.Errorf("victim %s: %v", p.Name, err)
	case note != "":
		e.note("%s %s", p.Name, note)
	}
	e.row.recordPhase(p.Name, cur.Status.Phase)
	var cond *v1.PodCondition
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == v1.DisruptionTarget {
			cond = &cur.Status.Conditions[i]
		}
	}
	switch {
	case cond == nil:
		e.t.Errorf("preempted pod %s has no %s condition: %+v", p.Name, v1.DisruptionTarget, cur.Status.Conditions)
	case cond.Status != v1.ConditionTrue || cond.Reason != v1.PodReasonTerminationByKubelet:
		e.t.Errorf("preempted pod %s: %s condition is %s/%s, want True/%s", p.Name, v1.DisruptionTarget, cond.Status, cond.Reason, v1.PodReasonTerminationByKubelet)
	}
	return cur
}

// waitEnded waits up to 30 s until terminal pod p's status is final enough
// to judge (victimEnded), and returns the last status read: the
// containers' ends can reach the API a status write after the phase.
func (e *env) waitEnded(p *v1.Pod, exit victimExit) *v1.Pod {
	e.t.Helper()
	cur := p
	_ = wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if victimEnded(cur.Status, exit) {
			return true, nil
		}
		if next, err := e.get(p); err == nil {
			cur = next
		}
		return false, nil
	})
	return cur
}

// victims lists the pods in namespaces that carry the kubelet's
// DisruptionTarget condition: the pods it preempted.
func (e *env) victims() []string {
	e.t.Helper()
	pods, err := e.c.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("listing pods: %v", err)
	}
	return prediction.Preempted(pods.Items)
}

// waitVictims waits up to 30 s until want pods named with prefix carry
// the kubelet's preemption condition (a victim's status reaches the API
// after its kill), then for quiet, in which no further pod may go, and
// returns their names.
func (e *env) waitVictims(prefix string, want int, quiet time.Duration) []string {
	e.t.Helper()
	named := func() []string {
		var out []string
		for _, name := range e.victims() {
			if strings.HasPrefix(name, prefix) {
				out = append(out, name)
			}
		}
		return out
	}
	_ = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(named()) >= want, nil
	})
	e.settle(quiet)
	return named()
}

// expectVictims checks that exactly want were preempted, and records them.
func (e *env) expectVictims(want ...string) {
	e.t.Helper()
	got := e.victims()
	e.row.victims = got
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		e.t.Errorf("preempted pods %v, want %v", got, want)
	}
}

// events returns the events about p with reason ("" for all).
func (e *env) events(p *v1.Pod, reason string) []v1.Event {
	e.t.Helper()
	sel := "involvedObject.uid=" + string(p.UID)
	if reason != "" {
		sel += ",reason=" + reason
	}
	list, err := e.c.CoreV1().Events(p.Namespace).List(e.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		e.t.Fatalf("listing events of %s: %v", p.Name, err)
	}
	return list.Items
}

// eventCount sums the counts of p's events with reason; the recorder folds
// repeats into one event with a count.
func (e *env) eventCount(p *v1.Pod, reason string) int {
	var n int
	for _, ev := range e.events(p, reason) {
		c := int(ev.Count)
		if c == 0 {
			c = 1
		}
		n += c
	}
	return n
}

// eventReasons lists the reasons of p's events, oldest first.
func (e *env) eventReasons(p *v1.Pod) []string {
	evs := e.events(p, "")
	sort.Slice(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Before(&evs[j].FirstTimestamp) })
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Reason)
	}
	return out
}

// deleteAndWait deletes p gracefully and waits until the kubelet has
// confirmed it gone, so that it no longer counts at admission.
func (e *env) deleteAndWait(p *v1.Pod) {
	e.t.Helper()
	err := e.c.CoreV1().Pods(p.Namespace).Delete(e.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(2))})
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("deleting %s: %v", p.Name, err)
	}
	err = wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.get(p)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s was not deleted: %v", p.Name, err)
	}
}

// settle gives the kubelet time for a few pod syncs and status updates
// before the test checks that something did not happen.
func (e *env) settle(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.ctx.Done():
	}
}
