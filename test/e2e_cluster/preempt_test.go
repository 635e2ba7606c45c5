//go:build e2ecluster

package e2ecluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/critlet/critlet/test/prediction"
)

// preempt fills worker n2 (critlet) with pods of every QoS class, then
// gives it two critical pods that do not fit: a static pod added to its
// manifests, and a pod of system-cluster-critical bound by nodeName, as
// a controller binds a DaemonSet's. Each is admitted by preempting pods
// alike to those upstream's handler picks on the same pods; no pod is
// preempted twice, and no pod is left Pending.
func (e *env) preempt(t *testing.T) {
	const node = "n2"
	free := e.freeCPU(t, node)
	kinds := []pod{
		{name: "besteffort"},
		{name: "burstable", resources: cpuRequest(300)},
		{name: "guaranteed", resources: "{requests: {cpu: 300m, memory: 32Mi}, limits: {cpu: 300m, memory: 32Mi}}"},
	}
	var fill []string
	var pods []pod
	for i := 0; i == 0 || free-300 >= 100; i++ {
		p := kinds[i%len(kinds)]
		if p.resources != "" {
			free -= 300
		}
		p.name, p.node = fmt.Sprintf("fill-%s-%d", p.name, i), node
		fill = append(fill, p.name)
		pods = append(pods, p)
	}
	e.apply(t, pods...)
	e.kubectl(t, append([]string{"wait", "--for=condition=Ready", "--timeout=180s", "pod"}, fill...)...)

	static := pod{name: "critical-static", namespace: "kube-system", class: "system-node-critical", resources: cpuRequest(e.freeCPU(t, node) + 400)}
	staticVictims := e.admitCritical(t, node, "critical-static-"+node, static.manifest(), func() {
		p := filepath.Join(e.c.RootDir(node), "etc/kubernetes/manifests/critical-static.yaml")
		if err := os.WriteFile(p, []byte(static.manifest()), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	bound := pod{name: "critical-bound", namespace: "kube-system", node: node, class: "system-cluster-critical", resources: cpuRequest(e.freeCPU(t, node) + 400)}
	boundVictims := e.admitCritical(t, node, "critical-bound", bound.manifest(), func() { e.apply(t, bound) })
	for _, v := range staticVictims {
		if slices.Contains(boundVictims, v) {
			t.Errorf("pod %s preempted twice", v)
		}
	}
	if pending := strings.TrimSpace(e.kubectl(t, "get", "pods", "--all-namespaces", "--field-selector=status.phase=Pending", "-o", "name")); pending != "" {
		t.Errorf("pods left Pending: %s", pending)
	}
	// The node for the scenarios after this one: the critical pods go,
	// and the fill.
	if err := os.Remove(filepath.Join(e.c.RootDir(node), "etc/kubernetes/manifests/critical-static.yaml")); err != nil {
		t.Error(err)
	}
	e.kubectl(t, "delete", "pod", "--namespace=kube-system", "critical-bound", "--wait=false")
	e.kubectl(t, append([]string{"delete", "pod", "--ignore-not-found", "--wait=false"}, fill...)...)
}

// nodePods are the pods bound to node, as the API has them.
func (e *env) nodePods(t *testing.T, node string) []v1.Pod {
	t.Helper()
	var list v1.PodList
	if err := json.Unmarshal([]byte(e.kubectl(t, "get", "pods", "--all-namespaces", "--field-selector=spec.nodeName="+node, "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// freeCPU is node's allocatable CPU less the requests of its active pods,
// in millicores.
func (e *env) freeCPU(t *testing.T, node string) int64 {
	t.Helper()
	var n v1.Node
	if err := json.Unmarshal([]byte(e.kubectl(t, "get", "node", node, "-o", "json")), &n); err != nil {
		t.Fatal(err)
	}
	free := n.Status.Allocatable.Cpu().MilliValue()
	for _, p := range prediction.Active(e.nodePods(t, node)) {
		for _, c := range p.Spec.Containers {
			free -= c.Resources.Requests.Cpu().MilliValue()
		}
	}
	return free
}

// prediction is what upstream's handler does on node's active pods for
// the critical pod of manifest: the pod (its priority as the Priority
// admission plugin resolves its class), the pods counted, the victims and
// the shortfall. A prediction that preempts nothing fails the test: the
// scenario made no shortage.
func (e *env) prediction(t *testing.T, node, manifest string) (crit *v1.Pod, others []*v1.Pod, victims []string, reasons string) {
	t.Helper()
	crit = &v1.Pod{}
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(crit); err != nil {
		t.Fatal(err)
	}
	if crit.Spec.Priority == nil {
		// A static pod is critical for being static.
		prio := int32(2000000000)
		if crit.Spec.PriorityClassName == "system-node-critical" {
			prio = 2000001000
		}
		crit.Spec.Priority = &prio
	}
	var n v1.Node
	if err := json.Unmarshal([]byte(e.kubectl(t, "get", "node", node, "-o", "json")), &n); err != nil {
		t.Fatal(err)
	}
	others = prediction.Active(e.nodePods(t, node))
	victims, reasons, err := prediction.StockVictims(&n, others, crit)
	if err != nil {
		t.Fatalf("upstream's handler for %s: %v", crit.Name, err)
	}
	if len(victims) == 0 {
		t.Fatalf("upstream's handler preempts nothing for %s: no shortage made", crit.Name)
	}
	return crit, others, victims, reasons
}

// predictVictims is prediction's victims.
func (e *env) predictVictims(t *testing.T, node, manifest string) []string {
	_, _, victims, _ := e.prediction(t, node, manifest)
	return victims
}

// admitCritical gives node the critical pod of manifest (its name in the
// API: mirror), by create, and checks that it runs once the kubelet has
// preempted pods alike to upstream's handler's choice. It returns the
// victims.
func (e *env) admitCritical(t *testing.T, node, mirror, manifest string, create func()) []string {
	t.Helper()
	crit, others, want, reasons := e.prediction(t, node, manifest)
	before := prediction.Preempted(e.nodePods(t, node))
	start := time.Now()
	create()
	e.waitPodReady(t, "kube-system", mirror, 3*time.Minute)
	running := time.Since(start)
	keys := func(names []string) []string { return prediction.AlikeKeys(crit, others, names) }
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got = nil
		for _, v := range prediction.Preempted(e.nodePods(t, node)) {
			if !slices.Contains(before, v) {
				got = append(got, v)
			}
		}
		if slices.Equal(keys(got), keys(want)) || time.Now().After(deadline) {
			break
		}
	}
	if g, w := keys(got), keys(want); !slices.Equal(g, w) {
		t.Errorf("%s: the kubelet preempted %v\n  alike: %v\nupstream's handler picks %v\n  alike: %v", mirror, got, g, want, w)
	}
	e.row("| preemption on %s for %s (short of %s) | Running in %s, victims %v (upstream's: %v) |", node, mirror, reasons, running.Round(time.Millisecond), got, want)
	return got
}
