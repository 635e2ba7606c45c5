package explain

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Live reads what the explanation needs from the API server.
type Live struct {
	Client kubernetes.Interface
}

// Node returns the node named name.
func (l Live) Node(ctx context.Context, name string) (*v1.Node, error) {
	n, err := l.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, inputErrorf("no node named %q", name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// Pods returns every pod bound to the node, in all namespaces.
func (l Live) Pods(ctx context.Context, node string) ([]*v1.Pod, error) {
	list, err := l.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	pods := make([]*v1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// Class is a ClassLookup on the API server.
func (l Live) Class(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	if name == "" {
		list, err := l.Client.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing priority classes: %w", err)
		}
		return DefaultClass(list.Items), nil
	}
	c, err := l.Client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading priority class %s: %w", name, err)
	}
	return c, nil
}
