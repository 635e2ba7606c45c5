package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/critlet/critlet/pkg/victims"
)

// bigNode is a node with room for n pods and n pods on it, as kubectl
// get -o json writes them: each pod with the metadata, spec and status a
// Deployment's running pod carries, about 3 KB.
func bigNode(tb testing.TB, n int) (nodeJSON, podsJSON []byte) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	items := make([]runtime.RawExtension, n)
	var usedCPU, usedMem int64 // millicores, MiB
	for i := range n {
		cpuM, memMi := 50+rng.Int64N(50), 60+rng.Int64N(50)
		cpu, mem := fmt.Sprintf("%dm", cpuM), fmt.Sprintf("%dMi", memMi)
		req := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		c := v1.Container{
			Name: "app", Image: "registry.example/app:1.2.3", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
			Env:                    []v1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			VolumeMounts:           []v1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			Resources:              v1.ResourceRequirements{Requests: req},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile, ImagePullPolicy: v1.PullIfNotPresent,
		}
		qos := v1.PodQOSBurstable
		switch i % 5 {
		case 0:
			c.Resources = v1.ResourceRequirements{}
			qos = v1.PodQOSBestEffort
			cpuM, memMi = 0, 0
		case 1, 2:
			c.Resources.Limits = req
			qos = v1.PodQOSGuaranteed
		}
		usedCPU += cpuM
		usedMem += memMi
		pod := v1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("app-%d-7d9f8c6b5-x%04d", i%40, i), Namespace: fmt.Sprintf("team-%d", i%12), UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
				Labels:          map[string]string{"app": fmt.Sprintf("app-%d", i%40), "pod-template-hash": "7d9f8c6b5"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("app-%d-7d9f8c6b5", i%40), UID: "11111111-2222-4333-8444-555555555555", Controller: ptr.To(true)}},
			},
			Spec: v1.PodSpec{
				NodeName: "big", Containers: []v1.Container{c}, Priority: ptr.To(int32(rng.IntN(3) * 1000)),
				RestartPolicy: v1.RestartPolicyAlways, DNSPolicy: v1.DNSClusterFirst, ServiceAccountName: "default", SchedulerName: "default-scheduler",
				Tolerations: []v1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))}},
			},
			Status: v1.PodStatus{
				Phase: v1.PodRunning, QOSClass: qos, PodIP: "10.244.3.7", HostIP: "10.0.0.11",
				Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: v1.PodScheduled, Status: v1.ConditionTrue}},
				ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, Image: c.Image, ImageID: "registry.example/app@sha256:0123456789abcdef", ContainerID: "containerd://0123456789abcdef", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
			},
		}
		raw, err := json.Marshal(pod)
		if err != nil {
			tb.Fatal(err)
		}
		items[i] = runtime.RawExtension{Raw: raw}
	}
	// Full but for one cpu and 10Gi.
	node := v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "big", Labels: map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": "big"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: *resource.NewMilliQuantity(usedCPU+1000, resource.DecimalSI), v1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", usedMem+10240)),
			v1.ResourcePods: resource.MustParse(fmt.Sprint(n + 10)),
		}},
	}
	var err error
	if nodeJSON, err = json.Marshal(node); err != nil {
		tb.Fatal(err)
	}
	list := v1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: items}
	if podsJSON, err = json.Marshal(list); err != nil {
		tb.Fatal(err)
	}
	return nodeJSON, podsJSON
}

// The agent wants 2 cpus where one is free.
const bigAgent = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"agent","namespace":"kube-system"},
"spec":{"priorityClassName":"system-node-critical","containers":[{"name":"a","image":"a","resources":{"requests":{"cpu":"2","memory":"1Gi"}}}]}}`

// BenchmarkOffline5000 is one explanation from files, as the command does
// it: decoding a 5,000-pod kubectl -o json (or yaml) output, the node and
// the pod, then admission and both policies' plans.
func BenchmarkOffline5000(b *testing.B) {
	nodeJSON, podsJSON := bigNode(b, 5000)
	podsYAML, err := yaml.JSONToYAML(podsJSON)
	if err != nil {
		b.Fatal(err)
	}
	for _, format := range []struct {
		name string
		pods []byte
	}{{"json", podsJSON}, {"yaml", podsYAML}} {
		b.Run(format.name, func(b *testing.B) {
			b.SetBytes(int64(len(format.pods)))
			for b.Loop() {
				explainFiles(b, nodeJSON, format.pods)
			}
		})
	}
}

func explainFiles(b *testing.B, nodeData, podsData []byte) {
	node, err := DecodeNode(nodeData)
	if err != nil {
		b.Fatal(err)
	}
	pods, err := DecodePods(podsData)
	if err != nil {
		b.Fatal(err)
	}
	pod, err := DecodePod([]byte(bigAgent))
	if err != nil {
		b.Fatal(err)
	}
	if err := ResolvePriority(context.Background(), pod, nil); err != nil {
		b.Fatal(err)
	}
	ex, err := Explain(context.Background(), Input{Node: node, Pods: pods, Pod: pod, Policies: victims.Policies})
	if err != nil {
		b.Fatal(err)
	}
	if ex.Verdict != AdmittedAfterPreemption || ex.ActivePods != 5000 {
		b.Fatalf("verdict %s over %d pods, want AdmittedAfterPreemption over 5000", ex.Verdict, ex.ActivePods)
	}
}
