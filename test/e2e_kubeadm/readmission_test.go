//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/critlet/critlet/internal/localnode"
	"github.com/critlet/critlet/pkg/readmission"
)

// healBound is how soon, with re-admission on, a refused static pod must
// run once room appears: the first backoff step, the kubelet's
// housekeeping period (2 s) and a pod start.
var healBound = readmission.DefaultBackoff.First + 2*time.Second + 10*time.Second

// enableReadmission turns critlet's static-pod re-admission on as an
// operator would on a kubeadm node: in /etc/default/kubelet, then a
// restart of the unit; the kubelet's settings line must say it is on.
func (kn *kubeadmNode) enableReadmission() {
	kn.t.Helper()
	if err := kn.k.setExtraArgs("--critical-static-pod-readmission"); err != nil {
		kn.t.Fatal(err)
	}
	since := logSize(kn.svc.logPath)
	kn.svc.restart()
	err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(kn.svc.logPath)
		if err != nil || int64(len(b)) < since {
			return false, nil
		}
		return strings.Contains(string(b[since:]), "--critical-static-pod-readmission=true"), nil
	})
	if err != nil {
		kn.t.Fatalf("the restarted kubelet did not log --critical-static-pod-readmission=true within 1m (log %s)", kn.svc.logPath)
	}
	kn.waitReady(time.Minute)
}

// refusedReason is the reason the kubelet gives a critical pod that no
// preemption can make room for.
const refusedReason = "UnexpectedAdmissionError"

// events counts the events of reason on the object named name, and
// returns the last one's message.
func (kn *kubeadmNode) events(namespace, name, reason string) (int, string) {
	kn.t.Helper()
	list, err := kn.client.CoreV1().Events(namespace).List(kn.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		kn.t.Fatalf("listing events of %s: %v", name, err)
	}
	n, msg := 0, ""
	for _, ev := range list.Items {
		n += int(max(ev.Count, 1))
		msg = ev.Message
	}
	return n, msg
}

// removeStatic removes a static pod's manifest and waits until its mirror
// pod is gone: the pod no longer counts on the node.
func (kn *kubeadmNode) removeStatic(path, mirror string) {
	kn.t.Helper()
	if err := os.Remove(path); err != nil {
		kn.t.Fatalf("removing %s: %v", path, err)
	}
	if kn.t.Failed() {
		return // the run ends here; reset and the node's removal follow
	}
	if err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kn.client.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		kn.t.Fatalf("mirror pod %s still there 2m after its manifest was removed", mirror)
	}
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readmissionOnKubeadmNode is scenario 3: the node's cpu held by a
// critical API pod, which a static pod may not preempt, a new static pod
// is refused (OutOfcpu); the holder is deleted. With re-admission on the
// static pod's mirror pod is Running within healBound; otherwise it stays
// refused for the same wait, not retried, as the stock kubelet leaves it.
func (kn *kubeadmNode) readmissionOnKubeadmNode(readmit bool) string {
	kn.t.Helper()
	free := kn.freeCPU()
	if free < 300 {
		kn.t.Fatalf("%dm cpu free, want at least 300m for the scenario's pods", free)
	}
	holder := workload{name: "room-holder", cpu: fmt.Sprintf("%dm", free-100)}.pod("kube-system")
	holder.Spec.PriorityClassName = "system-cluster-critical"
	kn.createRunning(holder)

	// Static pods are critical, but one without a priority may not
	// preempt a critical pod: nothing on the node is its victim.
	static := &v1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "late-static", Namespace: "kube-system"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: localnode.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"},
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m")}}}},
			TerminationGracePeriodSeconds: ptr.To(int64(2)),
		},
	}
	b, err := yaml.Marshal(static)
	if err != nil {
		kn.t.Fatal(err)
	}
	path := kn.manifestPath(static.Name)
	if err := writeAtomic(path, string(b)); err != nil {
		kn.t.Fatal(err)
	}
	defer kn.removeStatic(path, static.Name+"-"+nodeName)
	// A refused static pod has no mirror pod (the kubelet never syncs
	// it): its refusals are events on its name.
	mirror := static.Name + "-" + nodeName
	var refusals int
	var msg string
	if err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		refusals, msg = kn.events("kube-system", mirror, refusedReason)
		return refusals > 0, nil
	}); err != nil {
		kn.t.Fatalf("static pod %s not refused within 1m", mirror)
	}
	if !strings.Contains(msg, "cpu") {
		kn.t.Fatalf("static pod refused with %q, want a shortage of cpu", msg)
	}
	if err := kn.client.CoreV1().Pods("kube-system").Delete(kn.ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		kn.t.Fatal(err)
	}
	gone := time.Now()
	if err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kn.client.CoreV1().Pods("kube-system").Get(ctx, holder.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		kn.t.Fatalf("%s not gone within 1m of its deletion", holder.Name)
	}
	var phase v1.PodPhase
	healed := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, healBound, true, func(ctx context.Context) (bool, error) {
		p, err := kn.client.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == v1.PodRunning, nil
	}) == nil
	took := time.Since(gone)
	if after, _ := kn.events("kube-system", mirror, refusedReason); !readmit && after != refusals {
		kn.t.Errorf("static pod refused %d times, then %d: without re-admission the kubelet must not retry", refusals, after)
	}
	switch {
	case readmit && !healed:
		kn.t.Errorf("with re-admission on, the refused static pod is %s %s after room appeared, want Running within %s", phase, took.Round(time.Millisecond), healBound)
	case !readmit && healed:
		kn.t.Errorf("without re-admission, the refused static pod ran %s after room appeared; the stock kubelet leaves it refused", took.Round(time.Millisecond))
	case readmit:
		return fmt.Sprintf("refused static pod Running %s after room appeared", took.Round(time.Millisecond))
	}
	if phase == "" {
		phase = "refused (no mirror pod)"
	}
	return fmt.Sprintf("refused static pod still %s %s after room appeared, %d refusal(s)", phase, took.Round(time.Millisecond), refusals)
}
