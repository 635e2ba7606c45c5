//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/readmission"
	"github.com/critlet/critlet/test/prediction"
)

// Static-pod re-admission (scenarios 20-22): a static pod refused at
// admission is never tried again by the stock kubelet, nor by critlet with
// its defaults; critlet with --critical-static-pod-readmission admits it
// once room appears.

// readmitting is critlet with static-pod re-admission on.
var readmitting = critletKubelet.with([]string{"--critical-static-pod-readmission"}, nil)

const (
	// housekeepingPeriod is how often the kubelet's housekeeping, where
	// retries run, comes round.
	housekeepingPeriod = 2 * time.Second
	// podStartAllowance bounds a pod start on a busy two-core machine.
	podStartAllowance = 10 * time.Second
)

// healBound is how soon, with re-admission on, a refused static pod must
// run once a pod has left: the backoff's first step, a housekeeping round
// and a pod start. The kubelets without it get the same wait to not heal.
var healBound = readmission.DefaultBackoff.First + housekeepingPeriod + podStartAllowance

// refusedReason is the reason the kubelet gives a critical pod that no
// preemption can make room for.
const refusedReason = "UnexpectedAdmissionError"

func readmits(k kubeletUnderTest) bool {
	return slices.Contains(k.flags, "--critical-static-pod-readmission")
}

// runName makes a name no earlier run of the suite used, so that events
// found by name belong to this run.
func runName(base string) string {
	return fmt.Sprintf("%s-%s", base, strings.ToLower(fmt.Sprintf("%x", time.Now().UnixNano()>>24&0xfffff)))
}

// staticEvents counts the events with reason on the static pod whose mirror
// would be mirror (the kubelet records them on the static pod, which has
// the mirror's name and namespace).
func (e *env) staticEvents(mirror *v1.Pod, reason string) (int, string) {
	e.t.Helper()
	list, err := e.c.CoreV1().Events(mirror.Namespace).List(e.ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + mirror.Name + ",reason=" + reason})
	if err != nil {
		e.t.Fatalf("listing events of %s: %v", mirror.Name, err)
	}
	n, msg := 0, ""
	for _, ev := range list.Items {
		n += int(max(ev.Count, 1))
		msg = ev.Message
	}
	return n, msg
}

// waitRefused waits until the kubelet has refused the static pod of mirror
// n times and returns the last refusal's message.
func (e *env) waitRefused(mirror *v1.Pod, n int, timeout time.Duration) string {
	e.t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var got int
		got, msg = e.staticEvents(mirror, refusedReason)
		return got >= n, nil
	})
	if err != nil {
		e.t.Fatalf("static pod %s: not refused %d times within %s: %v", mirror.Name, n, timeout, err)
	}
	if !strings.Contains(msg, "no set of running pods found to reclaim resources") {
		e.t.Errorf("static pod %s refused with %q, want the preemption failure of kubernetes#138391", mirror.Name, msg)
	}
	return msg
}

// expectHealedOrNot checks what happens within healBound of a pod leaving
// at gone: with re-admission the static pod's mirror pod is Running,
// reached through one Readmitted event and counted by the metric; without
// it the pod is not running and was refused no more than refusals times.
// It returns the mirror pod as last seen.
func (e *env) expectHealedOrNot(mirror *v1.Pod, gone time.Time, refusals int) *v1.Pod {
	e.t.Helper()
	if !readmits(e.kubelet) {
		e.settle(time.Until(gone.Add(healBound)))
		cur, err := e.get(mirror)
		switch {
		case apierrors.IsNotFound(err):
			e.note("static pod still refused %s after a pod left: no mirror pod", healBound)
		case err != nil:
			e.t.Fatalf("getting the mirror pod: %v", err)
		case cur.Status.Phase == v1.PodRunning:
			e.t.Errorf("mirror pod %s Running without re-admission", mirror.Name)
		default:
			e.note("static pod still refused %s after a pod left: mirror pod %s", healBound, cur.Status.Phase)
		}
		if n, _ := e.staticEvents(mirror, refusedReason); n != refusals {
			e.t.Errorf("static pod refused %d times, want %d: this kubelet must not retry", n, refusals)
		}
		if n, _ := e.staticEvents(mirror, "Readmitted"); n != 0 {
			e.t.Errorf("%d Readmitted events from a kubelet without re-admission", n)
		}
		return cur
	}
	cur, err := e.waitMirrorPhase(mirror, v1.PodRunning, healBound)
	if err != nil {
		phase := "absent"
		if cur != nil {
			phase = string(cur.Status.Phase)
		}
		e.t.Fatalf("mirror pod %s not Running within %s of a pod leaving (last %s): %v", mirror.Name, healBound, phase, err)
	}
	e.row.latency = time.Since(gone)
	e.note("static pod Running %s after a pod left (bound %s = first step %s + housekeeping %s + pod start %s)",
		e.row.latency.Round(10*time.Millisecond), healBound, readmission.DefaultBackoff.First, housekeepingPeriod, podStartAllowance)
	if n, _ := e.staticEvents(mirror, "Readmitted"); n != 1 {
		e.t.Errorf("%d Readmitted events on the static pod, want 1", n)
	}
	if got := e.scrape("kubelet_static_pod_readmission_attempts_total")[`kubelet_static_pod_readmission_attempts_total{result="admitted"}`]; got != 1 {
		e.t.Errorf(`kubelet_static_pod_readmission_attempts_total{result="admitted"} = %v, want 1`, got)
	}
	return cur
}

// controlPlaneStatic is a static pod as a control plane's are: critical,
// restarted always (a container a previous kubelet ran, stopped when the
// pod is refused, is then restarted rather than leaving the pod Failed).
func controlPlaneStatic(name string, req v1.ResourceList) podSpec {
	s := staticCritical(name, req)
	s.restartPolicy = v1.RestartPolicyAlways
	return s
}

// criticalFillers are n small critical API pods: they hold pod slots or
// cpu, and no critical pod may preempt them.
func criticalFillers(prefix string, n int, cpu string) []podSpec {
	var out []podSpec
	for i := range n {
		out = append(out, critical(fmt.Sprintf("%s-%d", prefix, i), resources(cpu, "10Mi")))
	}
	return out
}

// kubernetes#111174: maxPods reached by pods the static pod may not
// preempt; it is refused. One pod leaves: with re-admission the static pod
// runs within the first backoff step and a pod start; without, it stays
// refused.
func TestRefusedStaticPodReadmitted(t *testing.T) {
	const maxPods = 3
	opts := scenarioOptions{maxPods: maxPods, critletVariants: []kubeletUnderTest{readmitting}}
	runScenario(t, "20 static pod refused at maxPods, then a pod leaves", opts, func(e *env) {
		if !e.kubelet.stock() {
			// The settings line names the patches built in (every declared
			// one) and those on.
			on := "critical-pod-admission"
			if readmits(e.kubelet) {
				on += ",static-pod-readmission"
			}
			e.expectSettingsLogged(`patches="`+strings.Join(declaredPatches(), ",")+`"`, `on="`+on+`"`)
		}
		fillers := e.createRunning(criticalFillers("filler", maxPods, "10m")...)
		// Refused first, so that were it not forgotten once its manifest is
		// removed, it would be tried first and take the slot.
		removed := controlPlaneStatic(runName("removed"), resources("10m", "10Mi"))
		e.waitRefused(e.writeStatic(removed), 1, time.Minute)
		mirror := e.writeStatic(controlPlaneStatic(runName("static"), resources("10m", "10Mi")))
		e.waitRefused(mirror, 1, time.Minute)
		if err := os.Remove(filepath.Join(suite.Config().ManifestDir(), removed.name+".yaml")); err != nil {
			e.t.Fatal(err)
		}
		var refusals int
		if readmits(e.kubelet) {
			// Tried again by backoff (2s, then housekeeping's next round) and
			// refused again; never a tight loop.
			e.waitRefused(mirror, 2, 15*time.Second)
			e.settle(time.Second)
			if refusals, _ = e.staticEvents(mirror, refusedReason); refusals > 3 {
				e.t.Errorf("refused %d times within a second of the second refusal: a tight loop", refusals)
			}
		} else {
			e.settle(7 * time.Second)
			if refusals, _ = e.staticEvents(mirror, refusedReason); refusals != 1 {
				e.t.Errorf("refused %d times in 7s without re-admission, want 1", refusals)
			}
		}
		e.note("refusals before room: %d", refusals)
		e.deleteAndWait(fillers[0])
		e.expectHealedOrNot(mirror, time.Now(), refusals)
		if _, err := e.get(e.mirrorOf(removed)); !apierrors.IsNotFound(err) {
			e.t.Errorf("the static pod whose manifest was removed has a mirror pod (%v)", err)
		}
		for _, f := range fillers[1:] {
			e.expectPhase(f, v1.PodRunning)
		}
		e.expectVictims()
	})
}

// manifestServer serves one static pod manifest over HTTP, as a node's
// --manifest-url source would, and can hold its answers back.
type manifestServer struct {
	url string
	srv *http.Server

	mu    sync.Mutex
	body  []byte
	delay time.Duration
}

func newManifestServer() (*manifestServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the manifest URL: %w", err)
	}
	m := &manifestServer{url: "http://" + l.Addr().String() + "/static.yaml"}
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serve), ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(l)
	return m, nil
}

func (m *manifestServer) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	body, delay := m.body, m.delay
	m.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-r.Context().Done():
		return
	}
	w.Write(body)
}

// set serves body (empty: no pods) after delay.
func (m *manifestServer) set(body []byte, delay time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.body, m.delay = body, delay
}

// kubernetes#138391 and #111174 at kubelet start: a static pod from an HTTP
// source runs; the kubelet restarts on a node whose API pods, admitted
// first, leave it no room; the static pod is refused and its mirror pod
// turns Failed. A pod leaves: with re-admission the mirror pod is Running
// again.
func TestStaticPodRefusedAtKubeletStart(t *testing.T) {
	const maxPods = 2
	ms, err := newManifestServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ms.srv.Close()
	opts := scenarioOptions{
		maxPods:         maxPods,
		critletVariants: []kubeletUnderTest{readmitting},
		// The HTTP source is read at start and every two seconds.
		kubeletFlags: []string{"--manifest-url=" + ms.url, "--http-check-frequency=2s"},
	}
	runScenario(t, "21 static pod (HTTP source) refused at kubelet start", opts, func(e *env) {
		s := controlPlaneStatic(runName("http-static"), resources("10m", "10Mi"))
		ms.set(e.staticManifest(s), 0)
		defer ms.set(nil, 0)
		mirror, err := e.waitMirrorPhase(e.mirrorOf(s), v1.PodRunning, 2*time.Minute)
		if err != nil {
			e.t.Fatalf("static pod from %s not Running: %v", ms.url, err)
		}
		if err := suite.StopKubelet(); err != nil {
			e.t.Fatalf("stopping the kubelet: %v", err)
		}
		var fillers []*v1.Pod
		for _, f := range criticalFillers("filler", maxPods, "10m") {
			fillers = append(fillers, e.create(f))
		}
		// The API pods reach the restarted kubelet first: the manifest is
		// answered only after they are admitted (the source waits 10s).
		ms.set(e.staticManifest(s), 6*time.Second)
		if err := suite.StartKubelet(e.ctx); err != nil {
			e.t.Fatalf("restarting the kubelet: %v", err)
		}
		for i, f := range fillers {
			fillers[i] = e.waitPhase(f, 2*time.Minute, v1.PodRunning)
		}
		e.waitRefused(mirror, 1, time.Minute)
		ms.set(e.staticManifest(s), 0)
		failed, err := e.waitMirrorPhase(mirror, v1.PodFailed, 30*time.Second)
		if err != nil {
			e.t.Fatalf("mirror pod %s not Failed after the refusal: %v", mirror.Name, err)
		}
		e.note("mirror pod after the refusal: %s (%s)", failed.Status.Phase, failed.Status.Reason)
		e.settle(3 * time.Second)
		refusals, _ := e.staticEvents(mirror, refusedReason)
		e.deleteAndWait(fillers[0])
		healed := e.expectHealedOrNot(mirror, time.Now(), refusals)
		if readmits(e.kubelet) {
			if healed.UID == mirror.UID {
				e.note("mirror pod patched back to Running in place (same UID): the API server accepts Failed to Running")
			} else {
				e.note("mirror pod recreated (new UID)")
			}
		}
		e.expectPhase(fillers[1], v1.PodRunning)
		e.expectVictims()
	})
}

// waitMirrorPhase waits until the mirror pod is in phase, whatever phases
// it passes through (waitPhase stops at a terminal one), and returns it as
// last seen.
func (e *env) waitMirrorPhase(mirror *v1.Pod, phase v1.PodPhase, timeout time.Duration) (*v1.Pod, error) {
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		cur, err := e.get(mirror)
		if err != nil {
			return false, nil
		}
		last = cur
		return cur.Status.Phase == phase, nil
	})
	return last, err
}

// Room appears only by preemption: the static pod is refused while every
// pod is critical; lower-priority API pods arrive and take the free cpu; a
// critical pod leaves, and the room it frees is still short of the static
// pod's request. With re-admission the retried static pod preempts, and
// its victims are alike to those upstream's handler picks for these pods.
func TestReadmittedStaticPodPreempts(t *testing.T) {
	opts := scenarioOptions{critletVariants: []kubeletUnderTest{readmitting}}
	runScenario(t, "22 re-admitted static pod preempts a later pod", opts, func(e *env) {
		alloc := e.allocatable()
		a := alloc.Cpu().MilliValue()
		m := func(v int64) string { return fmt.Sprintf("%dm", v) }
		// The static pod needs half the node; the critical pods leave a
		// quarter free, and the one that will leave frees three eighths.
		need := a / 2
		big := e.createRunning(critical("critical-big", resources(m(a-a/4-3*a/8), "10Mi")))[0]
		room := e.createRunning(critical("critical-room", resources(m(3*a/8), "10Mi")))[0]
		s := controlPlaneStatic(runName("static"), resources(m(need), "10Mi"))
		mirror := e.writeStatic(s)
		e.waitRefused(mirror, 1, time.Minute)
		// Two Burstable pods of an eighth each fill the free quarter.
		low := e.createRunning(burstable("low-a", m(a/8), "10Mi"), burstable("low-b", m(a/8), "10Mi"), bestEffort("low-be"))
		e.settle(2 * time.Second) // pause handles SIGTERM once it has started
		refusals, _ := e.staticEvents(mirror, refusedReason)
		e.deleteAndWait(room)
		gone := time.Now()

		node, err := e.c.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
		if err != nil {
			e.t.Fatalf("getting the node: %v", err)
		}
		crit := s.pod(e.node)
		want, reasons, err := prediction.StockVictims(node, e.activePods(), crit)
		if err != nil {
			e.t.Fatalf("upstream's handler on the node's pods: %v", err)
		}
		e.note("upstream's prediction for %s: %v", reasons, want)
		if len(want) == 0 {
			e.t.Fatalf("the static pod fits without preemption: the scenario leaves room it must not")
		}
		e.expectHealedOrNot(mirror, gone, refusals)
		if !readmits(e.kubelet) {
			e.expectVictims()
			for _, p := range append(low, big) {
				e.expectPhase(p, v1.PodRunning)
			}
			return
		}
		got := e.waitVictims("low-", len(want), time.Second)
		e.row.victims = got
		keys := func(names []string) []string { return prediction.AlikeKeys(crit, low, names) }
		if g, w := keys(got), keys(want); !slices.Equal(g, w) {
			e.t.Errorf("preempted %v (%v), upstream's handler picks %v (%v)", got, g, want, w)
		}
		for _, p := range low {
			if slices.Contains(got, p.Name) {
				e.expectPreempted(p, exitsOnTerm)
			} else {
				e.expectPhase(p, v1.PodRunning)
			}
		}
		e.expectPhase(big, v1.PodRunning)
	})
}

// declaredPatches names the patches pkg/patched declares, in its order.
func declaredPatches() []string {
	var names []string
	for _, p := range patched.Patches {
		names = append(names, p.Name)
	}
	return names
}
