package explain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	// Timeout bounds each request, its retries and waits included, so that
	// a stalled server is a ClusterError rather than a hang; zero leaves
	// only the caller's context.
	Timeout time.Duration
}

// request is the context of one request made under ctx.
func (l Live) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, l.Timeout)
}

// failed is the error of a request, made with req under ctx, that failed
// with err: says so where the server did not answer within the timeout.
func (l Live) failed(ctx, req context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(req.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s: %w", l.Timeout, err)
	}
	return err
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
	req, cancel := l.request(ctx)
	defer cancel()
	n, err := l.Client.CoreV1().Nodes().Get(req, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, inputErrorf("no node named %q", name)
	}
	if err != nil {
		return nil, clusterErrorf("reading node %s: %w", name, l.failed(ctx, req, err))
	}
	return n, nil
}

// Pods returns every pod bound to the node, in all namespaces.
func (l Live) Pods(ctx context.Context, node string) ([]*v1.Pod, error) {
	req, cancel := l.request(ctx)
	defer cancel()
	list, err := l.Client.CoreV1().Pods(metav1.NamespaceAll).List(req, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, clusterErrorf("listing the pods of node %s: %w", node, l.failed(ctx, req, err))
	}
	pods := make([]*v1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// Class is a ClassLookup on the API server.
func (l Live) Class(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	req, cancel := l.request(ctx)
	defer cancel()
	if name == "" {
		list, err := l.Client.SchedulingV1().PriorityClasses().List(req, metav1.ListOptions{})
		if err != nil {
			return nil, clusterErrorf("listing priority classes: %w", l.failed(ctx, req, err))
		}
		return DefaultClass(list.Items), nil
	}
	c, err := l.Client.SchedulingV1().PriorityClasses().Get(req, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, clusterErrorf("reading priority class %s: %w", name, l.failed(ctx, req, err))
	}
	return c, nil
}
