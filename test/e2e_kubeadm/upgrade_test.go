//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/critlet/critlet/internal/localnode"
	"github.com/critlet/critlet/test/prediction"
)

// workload is a pod the scenarios fill the node with.
type workload struct {
	name     string
	class    string // priority class, or none
	cpu      string // request; empty: none
	limitCPU string // limit; equal to cpu makes it Guaranteed (with memory)
}

// pod returns the workload as a pod in default, pinned to the node by the
// scheduler (kubeadm's scheduler runs; the node is its only one).
func (w workload) pod(namespace string) *v1.Pod {
	c := v1.Container{Name: "c", Image: localnode.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"}}
	if w.cpu != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(w.cpu), v1.ResourceMemory: resource.MustParse("16Mi")}
	}
	if w.limitCPU != "" {
		c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse(w.limitCPU), v1.ResourceMemory: resource.MustParse("16Mi")}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: namespace},
		Spec: v1.PodSpec{
			Containers:                    []v1.Container{c},
			PriorityClassName:             w.class,
			RestartPolicy:                 v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(2)),
		},
	}
}

// ensurePriorityClass creates a priority class unless it exists.
func (kn *kubeadmNode) ensurePriorityClass(name string, value int32) {
	kn.t.Helper()
	_, err := kn.client.SchedulingV1().PriorityClasses().Create(kn.ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		kn.t.Fatalf("priority class %s: %v", name, err)
	}
}

// untaint lets workloads onto the control-plane node, as a single-node
// cluster's operator does.
func (kn *kubeadmNode) untaint() {
	kn.t.Helper()
	node, err := kn.client.CoreV1().Nodes().Get(kn.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		kn.t.Fatal(err)
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == "node-role.kubernetes.io/control-plane" })
	if _, err := kn.client.CoreV1().Nodes().Update(kn.ctx, node, metav1.UpdateOptions{}); err != nil {
		kn.t.Fatalf("untainting the node: %v", err)
	}
}

// createRunning creates pods and waits until each is Running.
func (kn *kubeadmNode) createRunning(pods ...*v1.Pod) {
	kn.t.Helper()
	for _, p := range pods {
		if _, err := kn.client.CoreV1().Pods(p.Namespace).Create(kn.ctx, p, metav1.CreateOptions{}); err != nil {
			kn.t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	for _, p := range pods {
		kn.waitRunning(p.Namespace, p.Name, 2*time.Minute)
	}
}

// waitRunning waits until a pod is Running.
func (kn *kubeadmNode) waitRunning(namespace, name string, timeout time.Duration) {
	kn.t.Helper()
	state := "absent"
	err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := kn.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		state = fmt.Sprintf("%s (%s: %s)", p.Status.Phase, p.Status.Reason, p.Status.Message)
		return p.Status.Phase == v1.PodRunning, nil
	})
	if err != nil {
		kn.t.Fatalf("pod %s/%s not Running within %s: %s", namespace, name, timeout, state)
	}
}

// activePods lists the pods on the node the kubelet counts: not terminal.
func (kn *kubeadmNode) activePods() []*v1.Pod {
	kn.t.Helper()
	list, err := kn.client.CoreV1().Pods("").List(kn.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		kn.t.Fatalf("listing the node's pods: %v", err)
	}
	return prediction.Active(list.Items)
}

// freeCPU is the node's allocatable cpu less the requests of its active
// pods, in millicores.
func (kn *kubeadmNode) freeCPU() int64 {
	kn.t.Helper()
	node, err := kn.client.CoreV1().Nodes().Get(kn.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		kn.t.Fatal(err)
	}
	free := node.Status.Allocatable.Cpu().MilliValue()
	for _, p := range kn.activePods() {
		for _, c := range p.Spec.Containers {
			free -= c.Resources.Requests.Cpu().MilliValue()
		}
	}
	return free
}

// manifestPath is a control-plane static pod's manifest, as the host sees it.
func (kn *kubeadmNode) manifestPath(component string) string {
	return filepath.Join(kn.node.Config().PrivateDir("/etc/kubernetes"), "manifests", component+".yaml")
}

// upgradeOnFullNode is scenario 2: the node (untainted) filled with
// workloads of every QoS class and three priorities, kube-scheduler's
// manifest is rewritten with a larger cpu request, as `kubeadm upgrade` or
// an operator rewrites it. The new static pod needs room: the kubelet must
// preempt pods alike to those upstream's own handler picks for that pod on
// those pods, and the API server must stay reachable.
func (kn *kubeadmNode) upgradeOnFullNode() string {
	kn.t.Helper()
	kn.ensurePriorityClass("workload-low", 100)
	kn.ensurePriorityClass("workload-high", 1000)
	// Three of each QoS class, in 250m steps: the scheduler packs them
	// until 100m are left.
	free := kn.freeCPU()
	var fill []*v1.Pod
	fill = append(fill, workload{name: "besteffort-1"}.pod("default"), workload{name: "besteffort-2", class: "workload-high"}.pod("default"))
	kinds := []workload{
		{name: "burstable", cpu: "250m"},
		{name: "guaranteed", cpu: "250m", limitCPU: "250m"},
	}
	classes := []string{"", "workload-low", "workload-high"}
	for i := 0; free-250 >= 100; i++ {
		w := kinds[i%len(kinds)]
		w.name = fmt.Sprintf("%s-%d", w.name, i)
		w.class = classes[i%len(classes)]
		fill = append(fill, w.pod("default"))
		free -= 250
	}
	kn.createRunning(fill...)

	component := "kube-scheduler"
	path := kn.manifestPath(component)
	b, err := os.ReadFile(path)
	if err != nil {
		kn.t.Fatal(err)
	}
	old, err := decodePod(string(b))
	if err != nil {
		kn.t.Fatalf("%s: %v", path, err)
	}
	oldCPU := old.Spec.Containers[0].Resources.Requests.Cpu()
	newCPU := *resource.NewMilliQuantity(oldCPU.MilliValue()+kn.freeCPU()+400, resource.DecimalSI)
	want := fmt.Sprintf("cpu: %s", oldCPU.String())
	if strings.Count(string(b), want) != 1 {
		kn.t.Fatalf("%s: want one %q to raise", path, want)
	}
	rewritten := strings.Replace(string(b), want, "cpu: "+newCPU.String(), 1)
	crit, err := decodePod(rewritten)
	if err != nil {
		kn.t.Fatal(err)
	}
	// What the kubelet counts once the old static pod is removed: every
	// active pod but it.
	var others []*v1.Pod
	for _, p := range kn.activePods() {
		if p.Name != component+"-"+nodeName {
			others = append(others, p)
		}
	}
	node, err := kn.client.CoreV1().Nodes().Get(kn.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		kn.t.Fatal(err)
	}
	wantVictims, reasons, err := prediction.StockVictims(node, others, crit)
	if err != nil {
		kn.t.Fatalf("upstream's handler on the node's pods: %v", err)
	}
	if err := writeAtomic(path, rewritten); err != nil {
		kn.t.Fatal(err)
	}
	start := time.Now()
	// The new static pod's mirror pod Running with the new request.
	err = wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kn.client.CoreV1().Pods("kube-system").Get(ctx, component+"-"+nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.Status.Phase == v1.PodRunning && p.Spec.Containers[0].Resources.Requests.Cpu().Equal(newCPU), nil
	})
	if err != nil {
		kn.t.Fatalf("the rewritten %s (cpu %s) not Running within 3m", component, newCPU.String())
	}
	running := time.Since(start)
	if len(wantVictims) == 0 {
		kn.t.Fatalf("upstream's handler preempts nothing for the rewritten %s: the scenario made no shortage", component)
	}
	// A victim's status reaches the API after its kill: wait until the
	// victims match, or for 30 s.
	keys := func(names []string) []string { return prediction.AlikeKeys(crit, others, names) }
	var got []string
	_ = wait.PollUntilContextTimeout(kn.ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = kn.victims("default")
		return slices.Equal(keys(got), keys(wantVictims)), nil
	})
	if g, w := keys(got), keys(wantVictims); !slices.Equal(g, w) {
		kn.t.Errorf("the kubelet preempted %v\n  alike: %v\nupstream's handler picks %v\n  alike: %v", got, g, wantVictims, w)
	}
	if _, err := kn.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(kn.ctx); err != nil {
		kn.t.Errorf("the API server after the upgrade: %v", err)
	}
	return fmt.Sprintf("%s cpu %s -> %s on a node of %d workloads, short of %s: Running in %s, victims %v (upstream's: %v)",
		component, oldCPU.String(), newCPU.String(), len(fill), reasons, running.Round(time.Millisecond), got, wantVictims)
}

// victims lists the pods in namespace the kubelet preempted: those with its
// DisruptionTarget condition.
func (kn *kubeadmNode) victims(namespace string) []string {
	kn.t.Helper()
	pods, err := kn.client.CoreV1().Pods(namespace).List(kn.ctx, metav1.ListOptions{})
	if err != nil {
		kn.t.Fatal(err)
	}
	return prediction.Preempted(pods.Items)
}

func decodePod(s string) (*v1.Pod, error) {
	var p v1.Pod
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(s), 4096).Decode(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// writeAtomic replaces a manifest by rename, as kubeadm does: the kubelet
// never reads half a file.
func writeAtomic(path, content string) error {
	tmp := filepath.Join(filepath.Dir(filepath.Dir(path)), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
