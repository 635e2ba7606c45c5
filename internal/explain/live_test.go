package explain

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
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

// What the API server refuses or fails is the cluster's fault (the command
// exits 4), what it says does not exist and what could not be asked for
// at all are the input's (3).
func TestLiveErrorsSayWhoseFault(t *testing.T) {
	ctx := context.Background()
	node, _ := fixtures(t)
	failing := func(verb, resource string, err error) *fake.Clientset {
		c := fake.NewClientset(node)
		c.PrependReactor(verb, resource, func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		return c
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "worker-1", errors.New("RBAC: no"))
	gold := func(l Live) error {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{PriorityClassName: "gold"}}
		return ResolvePriority(ctx, pod, l.Class)
	}
	for name, tc := range map[string]struct {
		client *fake.Clientset
		ask    func(Live) error
		input  bool
	}{
		"node forbidden":      {failing("get", "nodes", forbidden), func(l Live) error { _, err := l.Node(ctx, "worker-1"); return err }, false},
		"node unknown":        {fake.NewClientset(), func(l Live) error { _, err := l.Node(ctx, "worker-1"); return err }, true},
		"node name malformed": {fake.NewClientset(), func(l Live) error { _, err := l.Node(ctx, "shop/worker-1"); return err }, true},
		"pods time out":       {failing("list", "pods", apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "list", 1)), func(l Live) error { _, err := l.Pods(ctx, "worker-1"); return err }, false},
		"class forbidden":     {failing("get", "priorityclasses", forbidden), gold, false},
		"default class fails": {failing("list", "priorityclasses", apierrors.NewInternalError(errors.New("etcd"))), func(l Live) error {
			return ResolvePriority(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, l.Class)
		}, false},
		"class unknown": {fake.NewClientset(), gold, true},
		"class name malformed": {fake.NewClientset(), func(l Live) error {
			return ResolvePriority(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{PriorityClassName: "gold/1"}}, l.Class)
		}, true},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.ask(Live{Client: tc.client})
			var cluster *ClusterError
			if isInput(err) != tc.input || errors.As(err, &cluster) == tc.input {
				t.Fatalf("error %v (%T): want an InputError %t, a ClusterError %t", err, err, tc.input, !tc.input)
			}
			t.Log(err)
		})
	}
}
