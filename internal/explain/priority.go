package explain

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
)

// ClassLookup returns the priority class named name, nil when there is no
// such class; it lists the global default class for name "". It stands for
// the API server's priority classes.
type ClassLookup func(ctx context.Context, name string) (*schedulingv1.PriorityClass, error)

// ResolvePriority sets pod.Spec.Priority as the API server's Priority
// admission plugin would on creation: a priority already in the spec
// stands; the two system classes have their fixed values; any other class,
// and the global default class for a pod without one, come from lookup.
// Without lookup (offline) an unknown class is an error and a pod without
// a class gets the plugin's priority when no default class exists.
func ResolvePriority(ctx context.Context, pod *v1.Pod, lookup ClassLookup) error {
	if pod.Spec.Priority != nil {
		return nil
	}
	name := pod.Spec.PriorityClassName
	for _, c := range schedulingapiv1.SystemPriorityClasses() {
		if name != "" && c.Name == name {
			pod.Spec.Priority = &c.Value
			return nil
		}
	}
	if lookup == nil {
		if name != "" {
			return inputErrorf("pod %s: priority class %q is not a system class and there is no API server to ask (offline): set spec.priority in the manifest", klog.KObj(pod), name)
		}
		value := int32(scheduling.DefaultPriorityWhenNoDefaultClassExists)
		pod.Spec.Priority = &value
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(name); name != "" && len(msgs) > 0 {
		return inputErrorf("pod %s: %q is not a priority class name: %s", klog.KObj(pod), name, strings.Join(msgs, "; "))
	}
	c, err := lookup(ctx, name)
	if err != nil {
		return fmt.Errorf("pod %s: resolving its priority: %w", klog.KObj(pod), err)
	}
	switch {
	case c != nil:
		pod.Spec.Priority = &c.Value
		if name == "" {
			pod.Spec.PriorityClassName = c.Name
		}
	case name != "":
		return inputErrorf("pod %s: no PriorityClass named %q", klog.KObj(pod), name)
	default:
		value := int32(scheduling.DefaultPriorityWhenNoDefaultClassExists)
		pod.Spec.Priority = &value
	}
	return nil
}

// DefaultClass picks the global default among classes as the admission
// plugin does: the lowest value when several claim it; nil when none does.
func DefaultClass(classes []schedulingv1.PriorityClass) *schedulingv1.PriorityClass {
	var d *schedulingv1.PriorityClass
	for i := range classes {
		if c := &classes[i]; c.GlobalDefault && (d == nil || c.Value < d.Value) {
			d = c
		}
	}
	return d
}
