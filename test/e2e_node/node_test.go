//go:build e2enode

package e2enode

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node itself: a pod whose volumes the kubelet mounts on tmpfs (a
// Secret and a memory-backed emptyDir), and a ConfigMap, sees them in its
// container, which needs the runtime to see the kubelet's mounts; and it
// gets a pod IP from the node's bridge.
func TestNodeRunsPodsWithVolumes(t *testing.T) {
	runScenario(t, "0 pod with volumes", scenarioOptions{}, func(e *env) {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: testNamespace}, Data: map[string]string{"key": "value"}}
		if _, err := e.c.CoreV1().ConfigMaps(testNamespace).Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating ConfigMap: %v", err)
		}
		e.t.Cleanup(func() {
			_ = e.c.CoreV1().ConfigMaps(testNamespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		})
		sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: testNamespace}, StringData: map[string]string{"token": "s3cret"}}
		if _, err := e.c.CoreV1().Secrets(testNamespace).Create(e.ctx, sec, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating Secret: %v", err)
		}
		e.t.Cleanup(func() {
			_ = e.c.CoreV1().Secrets(testNamespace).Delete(context.Background(), sec.Name, metav1.DeleteOptions{})
		})
		s := podSpec{name: "volumes", command: []string{"/bin/sh", "-c",
			// Exit 1 unless every volume holds what it should, the tmpfs
			// ones on tmpfs; then run.
			`test "$(cat /cfg/key)" = value && test "$(cat /sec/token)" = s3cret && ` +
				`grep -q ' /scratch tmpfs ' /proc/mounts && grep -q ' /sec tmpfs ' /proc/mounts && exec /pause`}}
		p := s.pod(e.node)
		p.Spec.Volumes = []v1.Volume{
			{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cm.Name}}}},
			{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: sec.Name}}},
		}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "scratch", MountPath: "/scratch"}, {Name: "sec", MountPath: "/sec"}}
		created, err := e.c.CoreV1().Pods(testNamespace).Create(e.ctx, p, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatalf("creating pod: %v", err)
		}
		cur := e.waitPhase(created, 2*time.Minute, v1.PodRunning)
		if cur.Status.PodIP == "" {
			e.t.Errorf("pod has no IP")
		}
		e.note("pod IP %s", cur.Status.PodIP)
	})
}
