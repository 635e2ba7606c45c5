package explain

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Live reads what the explanation needs from the API server.
type Live struct {
	Client kubernetes.Interface
}

// ClusterError is a question the API server did not answer: unreachable,
// refused (401, 403), failed or cut short. The cluster, not the input, is
// at fault; what the server says does not exist is an InputError instead.
type ClusterError struct{ err error }

func (e *ClusterError) Error() string { return e.err.Error() }
func (e *ClusterError) Unwrap() error { return e.err }

func clusterErrorf(format string, args ...any) error {
	return &ClusterError{fmt.Errorf(format, args...)}
}

// Node returns the node named name.
func (l Live) Node(ctx context.Context, name string) (*v1.Node, error) {
	// Checked here, as the client refuses some malformed names itself
	// (with a "/") with an error that does not say it is the input's.
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, inputErrorf("%q is not a node name: %s", name, strings.Join(msgs, "; "))
	}
	n, err := l.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, inputErrorf("no node named %q", name)
	}
	if err != nil {
		return nil, clusterErrorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// Pods returns every pod bound to the node, in all namespaces.
func (l Live) Pods(ctx context.Context, node string) ([]*v1.Pod, error) {
	list, err := l.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, clusterErrorf("listing the pods of node %s: %w", node, err)
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
			return nil, clusterErrorf("listing priority classes: %w", err)
		}
		return DefaultClass(list.Items), nil
	}
	c, err := l.Client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, clusterErrorf("reading priority class %s: %w", name, err)
	}
	return c, nil
}
