package explain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/critlet/critlet/pkg/victims"
)

// The fixtures, as kubectl writes them: worker-1 has 4 cpus, 8Gi, 110
// pods and 2 example.com/dongle. Its pods (testdata/pods.yaml):
//
//	pod                   QoS         priority     cpu    memory  dongle
//	default/be-1          BestEffort  0            -      -       -
//	default/burst-small   Burstable   0            200m   256Mi   1
//	shop/burst-large      Burstable   1000         1      1Gi     -
//	shop/guar-1           Guaranteed  0            1500m  2Gi     1
//	kube-system/kube-proxy-worker-1   2000001000   100m   64Mi    -   (mirror: critical, never a victim)
//	default/job-done      Succeeded: not counted
//	default/elsewhere     bound to worker-2: not counted
//
// So 5 active pods use 2800m cpu, 3392Mi memory and both dongles: 1200m
// cpu and 4800Mi are free.
func fixtures(t *testing.T) (*v1.Node, []*v1.Pod) {
	t.Helper()
	node, err := DecodeNode(read(t, "testdata/node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := DecodePods(read(t, "testdata/pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 7 {
		t.Fatalf("pods.yaml: decoded %d pods, want 7", len(pods))
	}
	return node, pods
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func podFrom(t *testing.T, manifest string) *v1.Pod {
	t.Helper()
	pod, err := DecodePod([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	if err := ResolvePriority(context.Background(), pod, nil); err != nil {
		t.Fatal(err)
	}
	return pod
}

const agentTemplate = `
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: kube-system}
spec:
  priorityClassName: system-node-critical
  containers:
  - name: agent
    image: registry.example/agent:2
    resources:
      requests: %s
      limits: %s
`

func agent(requests string) string {
	return fmt.Sprintf(agentTemplate, requests, requests)
}

type want struct {
	verdict Verdict
	reason  string
	// victims per policy, upstream then priority, as namespace/name.
	upstream, priority []string
	shortfall          []Shortage
}

func TestExplainFixtures(t *testing.T) {
	node, pods := fixtures(t)
	tests := []struct {
		name, pod string
		static    bool
		// devicePreemption and notDevices: Input's.
		devicePreemption bool
		notDevices       []string
		// maxPods, when set, replaces the node's allocatable pods.
		maxPods string
		want    want
	}{{
		// cpu 1500m against 1200m free: 300m short. Upstream spares the
		// Guaranteed pod (the Burstable ones hold 1200m) and takes, within
		// Burstable, the pod closest to the need: burst-large (1 cpu) is at
		// distance 0, burst-small (200m) leaves 100m. The priority policy
		// stays below priority 1000 while priority-0 pods suffice (200m +
		// 1500m): within those, BestEffort and Burstable hold only 200m, so
		// the Guaranteed guar-1 goes, and then nothing else is needed.
		name: "cpu short: the policies differ",
		pod:  agent("{cpu: 1500m, memory: 512Mi}"),
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "cpu", Missing: 300, Requested: 1500, Used: 2800, Capacity: 4000}},
			upstream:  []string{"shop/burst-large"},
			priority:  []string{"shop/guar-1"},
		},
	}, {
		// Both dongles are held, by burst-small and guar-1. The container
		// manager's allocate handler refuses the pod before the predicate
		// weighs it: nothing is preempted, as on the stock kubelet.
		name: "device short",
		pod:  agent("{cpu: 100m, example.com/dongle: 1}"),
		want: want{
			verdict:   Rejected,
			reason:    "UnexpectedAdmissionError",
			shortfall: []Shortage{{Resource: "example.com/dongle", Device: true, Missing: 1, Requested: 1, Used: 2, Capacity: 2}},
		},
	}, {
		// With --critical-preemption-devices: upstream and the priority
		// policy (both priority 0) spare the Guaranteed pod since a
		// Burstable one covers the need: burst-small, at distance 0.
		name:             "device short, device preemption",
		devicePreemption: true,
		pod:              agent("{cpu: 100m, example.com/dongle: 1}"),
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "example.com/dongle", Device: true, Missing: 1, Requested: 1, Used: 2, Capacity: 2}},
			upstream:  []string{"default/burst-small"},
			priority:  []string{"default/burst-small"},
		},
	}, {
		// Advertised without a device plugin: the predicate alone weighs
		// it, and the critical-pod handler preempts for it on any kubelet.
		name:       "extended resource, not a device plugin's",
		notDevices: []string{"example.com/dongle"},
		pod:        agent("{cpu: 100m, example.com/dongle: 1}"),
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "example.com/dongle", Missing: 1, Requested: 1, Used: 2, Capacity: 2}},
			upstream:  []string{"default/burst-small"},
			priority:  []string{"default/burst-small"},
		},
	}, {
		// cpu 1300m (100m short) and a dongle with device preemption: one
		// selection for both. burst-small frees 200m and a dongle.
		name:             "device and cpu short, device preemption",
		devicePreemption: true,
		pod:              agent("{cpu: 1300m, example.com/dongle: 1}"),
		want: want{
			verdict: AdmittedAfterPreemption,
			shortfall: []Shortage{
				{Resource: "cpu", Missing: 100, Requested: 1300, Used: 2800, Capacity: 4000},
				{Resource: "example.com/dongle", Device: true, Missing: 1, Requested: 1, Used: 2, Capacity: 2},
			},
			upstream: []string{"default/burst-small"},
			priority: []string{"default/burst-small"},
		},
	}, {
		// Three dongles on a node of two: no set of pods frees enough, so
		// the patch refuses as upstream, with the allocate handler's
		// refusal.
		name:             "more devices than the node has, device preemption",
		devicePreemption: true,
		pod:              agent("{cpu: 100m, example.com/dongle: 3}"),
		want: want{
			verdict:   Rejected,
			reason:    "UnexpectedAdmissionError",
			shortfall: []Shortage{{Resource: "example.com/dongle", Device: true, Missing: 3, Requested: 3, Used: 2, Capacity: 2}},
		},
	}, {
		// cpu 3 against 1200m free: 1800m short. Burstable pods hold
		// 1200m, so 600m must come from Guaranteed: guar-1. Then Burstable
		// for what guar-1 leaves (300m): burst-large, at distance 0.
		// Priority: priority-0 pods hold 1700m < 1800m, so priority 1000 is
		// needed too; all candidates are then open and it decides as
		// upstream.
		name: "cpu short across classes",
		pod:  agent("{cpu: 3}"),
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "cpu", Missing: 1800, Requested: 3000, Used: 2800, Capacity: 4000}},
			upstream:  []string{"shop/burst-large", "shop/guar-1"},
			priority:  []string{"shop/burst-large", "shop/guar-1"},
		},
	}, {
		// cpu 5: 3800m short, and every preemptable pod together holds only
		// 2700m (kube-proxy is critical): 1100m stays missing.
		name: "no set of pods is enough",
		pod:  agent("{cpu: 5}"),
		want: want{
			verdict:   Rejected,
			reason:    "UnexpectedAdmissionError",
			shortfall: []Shortage{{Resource: "cpu", Missing: 3800, Requested: 5000, Used: 2800, Capacity: 4000}},
		},
	}, {
		name: "fits",
		pod:  agent("{cpu: 1, memory: 1Gi}"),
		want: want{verdict: Fits},
	}, {
		// A node selector no label matches: preemption cannot help.
		name: "node selector",
		pod: `
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: kube-system}
spec:
  priorityClassName: system-node-critical
  nodeSelector: {disktype: ssd}
  containers: [{name: agent, image: registry.example/agent:2}]
`,
		want: want{verdict: Rejected, reason: "NodeAffinity"},
	}, {
		// A static pod without priority is critical; non-critical pods are
		// its candidates, as for the agent: the same victims as the first
		// case.
		name:   "static pod",
		static: true,
		pod: `
apiVersion: v1
kind: Pod
metadata: {name: etcd-worker-1, namespace: kube-system}
spec:
  containers:
  - {name: etcd, image: registry.k8s.io/etcd:3.6, resources: {requests: {cpu: 1500m}}}
`,
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "cpu", Missing: 300, Requested: 1500, Used: 2800, Capacity: 4000}},
			upstream:  []string{"shop/burst-large"},
			priority:  []string{"shop/guar-1"},
		},
	}, {
		// Five active pods on a node for five: the pods count is short by
		// one, and every pod frees one. Upstream takes BestEffort pods first
		// where they cover the need: be-1. The priority policy's
		// priority-0 pods include be-1 too.
		name:    "pods count",
		pod:     agent("{cpu: 100m}"),
		maxPods: "5",
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "pods", Missing: 1, Requested: 1, Used: 5, Capacity: 5}},
			upstream:  []string{"default/be-1"},
			priority:  []string{"default/be-1"},
		},
	}, {
		// Pod-level resources (on by default in this release) stand for the
		// containers': the same shortfall and victims as the agent above.
		name: "pod-level resources",
		pod: `
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: kube-system}
spec:
  priorityClassName: system-node-critical
  resources: {requests: {cpu: 1500m, memory: 512Mi}}
  containers: [{name: agent, image: registry.example/agent:2}]
`,
		want: want{
			verdict:   AdmittedAfterPreemption,
			shortfall: []Shortage{{Resource: "cpu", Missing: 300, Requested: 1500, Used: 2800, Capacity: 4000}},
			upstream:  []string{"shop/burst-large"},
			priority:  []string{"shop/guar-1"},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := node.DeepCopy()
			if tc.maxPods != "" {
				node.Status.Allocatable[v1.ResourcePods] = resource.MustParse(tc.maxPods)
			}
			ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, tc.pod), Static: tc.static, Policies: victims.Policies,
				DevicePreemption: tc.devicePreemption, NotDevices: tc.notDevices})
			if err != nil {
				t.Fatal(err)
			}
			if ex.ActivePods != 5 {
				t.Errorf("active pods: %d, want 5", ex.ActivePods)
			}
			if ex.Verdict != tc.want.verdict || ex.Reason != tc.want.reason {
				t.Errorf("verdict %s (%s: %s), want %s (%s)", ex.Verdict, ex.Reason, ex.Message, tc.want.verdict, tc.want.reason)
			}
			if !reflect.DeepEqual(ex.Shortfall, tc.want.shortfall) {
				t.Errorf("shortfall %+v, want %+v", ex.Shortfall, tc.want.shortfall)
			}
			if tc.want.verdict != AdmittedAfterPreemption {
				// Plans exist only where the pod lacks resources alone, and
				// then none may preempt anything.
				if len(tc.want.shortfall) == 0 && len(ex.Policies) > 0 {
					t.Errorf("plans without a shortfall: %+v", ex.Policies)
				}
				for _, p := range ex.Policies {
					if len(p.Victims) > 0 || p.Verdict != Rejected {
						t.Errorf("policy %s: %+v, want rejected without victims", p.Policy, p)
					}
				}
				return
			}
			if len(ex.Policies) != 2 {
				t.Fatalf("%d policies planned, want 2", len(ex.Policies))
			}
			for i, wantVictims := range [][]string{tc.want.upstream, tc.want.priority} {
				if got := names(ex.Policies[i].Victims); !reflect.DeepEqual(got, wantVictims) {
					t.Errorf("policy %s: victims %v, want %v", ex.Policies[i].Policy, got, wantVictims)
				}
			}
		})
	}
}

func names(vs []Victim) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Namespace+"/"+v.Name)
	}
	return out
}

// The kubelet's message for a refused critical pod, as it lands in the
// pod's status.
func TestRejectedMessage(t *testing.T) {
	node, pods := fixtures(t)
	ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, agent("{cpu: 5}")), Policies: victims.Policies})
	if err != nil {
		t.Fatal(err)
	}
	const msg = "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1100), ]"
	if ex.Message != msg {
		t.Errorf("message %q, want %q", ex.Message, msg)
	}
	for _, p := range ex.Policies {
		if p.Verdict != Rejected || p.Error == "" {
			t.Errorf("policy %s: %+v, want rejected with the reason", p.Policy, p)
		}
	}
}

// kubectl -o json of the same pods decodes to the same pods.
func TestJSONFixtures(t *testing.T) {
	_, fromYAML := fixtures(t)
	j, err := yaml.YAMLToJSON(read(t, "testdata/pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := DecodePods(j)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Error("the JSON form decodes to other pods than the YAML form")
	}
}

func TestBadInput(t *testing.T) {
	node, pods := fixtures(t)
	for name, tc := range map[string]struct {
		decode func() error
	}{
		"malformed quantity": {func() error {
			_, err := DecodePod([]byte(fmt.Sprintf(agentTemplate, "{cpu: 2x}", "{}")))
			return err
		}},
		"wrong kind for the node": {func() error { _, err := DecodeNode(read(t, "testdata/agent.yaml")); return err }},
		"wrong kind in a List":    {func() error { _, err := DecodeNode(read(t, "testdata/pods.yaml")); return err }},
		"not an object":           {func() error { _, err := DecodePods([]byte("just: [text")); return err }},
		"unknown class offline": {func() error {
			pod, err := DecodePod([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {priorityClassName: gold, containers: [{name: c, image: i}]}\n"))
			if err != nil {
				return nil
			}
			return ResolvePriority(context.Background(), pod, nil)
		}},
		"not critical": {func() error {
			pod := podFrom(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n")
			_, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: pod, Policies: victims.Policies})
			return err
		}},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.decode()
			var input *InputError
			if !errors.As(err, &input) {
				t.Fatalf("error %v, want an InputError", err)
			}
			t.Log(err)
		})
	}
}
