package explain

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestLive(t *testing.T) {
	ctx := context.Background()
	node, pods := fixtures(t)
	objects := []runtime.Object{node}
	for _, p := range pods {
		objects = append(objects, p)
	}
	objects = append(objects,
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "gold"}, Value: 2_000_000_500},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "default-b"}, Value: 20, GlobalDefault: true},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "default-a"}, Value: 10, GlobalDefault: true},
	)
	client := fake.NewClientset(objects...)
	live := Live{Client: client}

	if _, err := live.Node(ctx, "worker-9"); !isInput(err) {
		t.Errorf("unknown node: %v, want an InputError", err)
	}
	got, err := live.Node(ctx, "worker-1")
	if err != nil || got.Name != "worker-1" {
		t.Fatalf("node: %v %v", got, err)
	}
	if _, err := live.Pods(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		class     string
		priority  *int32
		want      int32
		wantClass string
		input     bool
	}{
		{class: "gold", want: 2_000_000_500, wantClass: "gold"},
		{class: "system-cluster-critical", want: 2_000_000_000, wantClass: "system-cluster-critical"},
		// The lowest of two global defaults, as the admission plugin.
		{class: "", want: 10, wantClass: "default-a"},
		{class: "silver", input: true},
		{class: "gold", priority: ptr.To(int32(7)), want: 7, wantClass: "gold"},
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{PriorityClassName: tc.class, Priority: tc.priority}}
		err := ResolvePriority(ctx, pod, live.Class)
		if tc.input {
			if !isInput(err) {
				t.Errorf("class %q: %v, want an InputError", tc.class, err)
			}
			continue
		}
		if err != nil || *pod.Spec.Priority != tc.want || pod.Spec.PriorityClassName != tc.wantClass {
			t.Errorf("class %q: priority %v class %q err %v, want %d %q", tc.class, pod.Spec.Priority, pod.Spec.PriorityClassName, err, tc.want, tc.wantClass)
		}
	}
}

func isInput(err error) bool {
	var input *InputError
	return errors.As(err, &input)
}
