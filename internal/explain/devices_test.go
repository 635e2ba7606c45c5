package explain

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/critlet/critlet/pkg/victims"
)

// The allocate handler's refusal, as it lands in the pod's status: the
// device manager's words for the first container it cannot serve, in the
// container manager's wrapper.
func TestDeviceRefusalMessage(t *testing.T) {
	node, pods := fixtures(t)
	withInit := `
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: kube-system}
spec:
  priorityClassName: system-node-critical
  initContainers:
  - {name: setup, image: registry.example/agent:2, resources: {limits: {example.com/dongle: 1}}}
  containers:
  - {name: agent, image: registry.example/agent:2, resources: {limits: {example.com/dongle: 2}}}
`
	for _, tc := range []struct {
		name, pod string
		// dongles, when set, replaces the node's allocatable dongles.
		dongles string
		want    string
	}{
		{"short", agent("{example.com/dongle: 1}"), "",
			"Allocate failed due to requested number of devices unavailable for example.com/dongle. Requested: 1, Available: 0, which is unexpected"},
		// Four dongles, two free: the init container takes one, the app
		// container reuses it and asks one more of the one left. Fits.
		{"init container's device reused", withInit, "4", ""},
		// Three: one free; the init container takes it, the app container
		// reuses it and finds none for its second.
		{"init container's device reused, one short", withInit, "3",
			"Allocate failed due to requested number of devices unavailable for example.com/dongle. Requested: 1, Available: 0, which is unexpected"},
		{"no healthy device", agent("{example.com/dongle: 1}"), "0",
			"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dongle, which is unexpected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := node.DeepCopy()
			if tc.dongles != "" {
				node.Status.Allocatable["example.com/dongle"] = resource.MustParse(tc.dongles)
			}
			ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, tc.pod), Policies: victims.Policies})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if ex.Verdict != Fits {
					t.Errorf("verdict %s (%s), want Fits", ex.Verdict, ex.Message)
				}
				return
			}
			if ex.Verdict != Rejected || ex.Reason != "UnexpectedAdmissionError" || ex.Message != tc.want {
				t.Errorf("verdict %s %s %q, want Rejected UnexpectedAdmissionError %q", ex.Verdict, ex.Reason, ex.Message, tc.want)
			}
		})
	}
}

// Victims name the devices they hold, and the plan what they free.
func TestDeviceVictims(t *testing.T) {
	node, pods := fixtures(t)
	ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, agent("{example.com/dongle: 2}")),
		Policies: []victims.Policy{victims.PolicyUpstream}, DevicePreemption: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Verdict != AdmittedAfterPreemption || len(ex.Policies) != 1 {
		t.Fatalf("verdict %s (%s), %d plans; want admitted after preemption, one plan", ex.Verdict, ex.Message, len(ex.Policies))
	}
	p := ex.Policies[0]
	if got := names(p.Victims); !reflect.DeepEqual(got, []string{"default/burst-small", "shop/guar-1"}) {
		t.Fatalf("victims %v, want both dongle holders", got)
	}
	for _, v := range p.Victims {
		if !reflect.DeepEqual(v.Devices, map[string]int64{"example.com/dongle": 1}) {
			t.Errorf("victim %s holds %v, want one dongle", v.Name, v.Devices)
		}
	}
	if p.Freed["example.com/dongle"] != 2 {
		t.Errorf("freed %v, want two dongles", p.Freed)
	}
}

func TestNotDevicesMustBeExtendedResources(t *testing.T) {
	node, pods := fixtures(t)
	for _, r := range []string{"cpu", "hugepages-2Mi", "kubernetes.io/widget", "not a name"} {
		_, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, agent("{cpu: 1}")), Policies: victims.Policies, NotDevices: []string{r}})
		var input *InputError
		if !errors.As(err, &input) || !strings.Contains(err.Error(), r) {
			t.Errorf("--not-device-resource %q: %v, want an input error naming it", r, err)
		}
	}
}

// Each refusal text is the pinned upstream device manager's, so a reworded
// upstream fails here rather than explaining in words the kubelet no
// longer uses.
func TestDeviceRefusalsAreTheDeviceManagers(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating the upstream module: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg/kubelet/cm/devicemanager/manager.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`fmt.Errorf("` + noHealthyDevices + `%s", resource)`,
		`fmt.Errorf("` + devicesUnavailable + `%s. Requested: %d, Available: %d", resource, needed, available.Len())`,
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("upstream's device manager no longer says %s", want)
		}
	}
}

// With device preemption, a pod the predicate refuses for a reason
// preemption cannot fix is refused with the allocate handler's refusal,
// nothing planned; a node whose healthy devices fell below those held
// counts only as many held as are healthy, as the device manager does.
func TestDevicePreemptionLimits(t *testing.T) {
	node, pods := fixtures(t)
	selector := `
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: kube-system}
spec:
  priorityClassName: system-node-critical
  nodeSelector: {disktype: ssd}
  containers: [{name: agent, image: registry.example/agent:2, resources: {limits: {example.com/dongle: 1}}}]
`
	ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, selector), Policies: victims.Policies, DevicePreemption: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Verdict != Rejected || ex.Reason != "UnexpectedAdmissionError" || len(ex.Policies) != 0 {
		t.Errorf("node selector unmatched: %s %s, %d plans; want the allocate handler's refusal and no plan", ex.Verdict, ex.Reason, len(ex.Policies))
	}

	node = node.DeepCopy()
	node.Status.Allocatable["example.com/dongle"] = resource.MustParse("1")
	ex, err = Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, agent("{example.com/dongle: 1}")), Policies: victims.Policies, DevicePreemption: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Shortage{{Resource: "example.com/dongle", Device: true, Missing: 1, Requested: 1, Used: 1, Capacity: 1}}
	if !reflect.DeepEqual(ex.Shortfall, want) {
		t.Errorf("one healthy dongle, two held: shortfall %+v, want %+v", ex.Shortfall, want)
	}
}

// For a device shortfall critlet-explain breaks full ties for the fewest
// victims, as the patch does: both Burstable holders free the gpu, and the
// later one would leave the nic to the BestEffort pod.
func TestDeviceVictimsFewestOnATie(t *testing.T) {
	node, _ := fixtures(t)
	node.Status.Allocatable["example.com/gpu"] = resource.MustParse("5")
	node.Status.Allocatable["example.com/nic"] = resource.MustParse("3")
	holder := func(name, qos, devices string) *v1.Pod {
		resources := `{requests: {cpu: 100m, memory: 64Mi, ` + devices + `}, limits: {` + devices + `}}`
		if qos == "BestEffort" {
			resources = `{requests: {` + devices + `}, limits: {` + devices + `}}`
		}
		p := podFrom(t, `
apiVersion: v1
kind: Pod
metadata: {name: `+name+`, namespace: default, uid: `+name+`}
spec:
  nodeName: worker-1
  containers:
  - {name: main, image: registry.example/batch:1, resources: `+resources+`}
`)
		p.Status.Phase = v1.PodRunning
		return p
	}
	pods := []*v1.Pod{
		holder("both", "Burstable", `example.com/gpu: 2, example.com/nic: 2`),
		holder("nic-only", "BestEffort", `example.com/nic: 1`),
		holder("gpus-only", "Burstable", `example.com/gpu: 3`),
	}
	ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: podFrom(t, agent("{example.com/gpu: 1, example.com/nic: 1}")),
		Policies: victims.Policies, DevicePreemption: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Verdict != AdmittedAfterPreemption {
		t.Fatalf("verdict %s (%s %s), want admitted after preemption", ex.Verdict, ex.Reason, ex.Message)
	}
	for _, p := range ex.Policies {
		if got := names(p.Victims); !reflect.DeepEqual(got, []string{"default/both"}) {
			t.Errorf("%s: victims %v, want default/both alone", p.Policy, got)
		}
	}
}
