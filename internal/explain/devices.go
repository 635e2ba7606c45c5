package explain

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/kubelet/cm/admission"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/devicedemand"
)

// deviceView is the node's device-plugin resources as the API shows them.
// The container manager's allocate handler weighs them before the admission
// predicate: a pod short of devices is refused there, and only the
// critical-preemption-devices patch preempts for it.
type deviceView struct {
	// healthy[r]: the node's allocatable r, which the kubelet sets to its
	// healthy devices. Every extended resource the node advertises is
	// taken for a device plugin's unless named otherwise.
	healthy map[string]int64
	// used[r]: what the active pods take of r, as the device manager
	// counts their allocations.
	used map[string]int64
}

// newDeviceView reads node's device-plugin resources and what active holds
// of them. notDevices names extended resources advertised without a device
// plugin, which only the predicate weighs. O(pods × containers × resources).
func newDeviceView(node *v1.Node, active []*v1.Pod, notDevices []string) (deviceView, error) {
	skip := map[string]bool{}
	for _, r := range notDevices {
		if !v1helper.IsExtendedResourceName(v1.ResourceName(r)) {
			return deviceView{}, inputErrorf("%q is not an extended resource name: only extended resources come from device plugins", r)
		}
		skip[r] = true
	}
	d := deviceView{healthy: map[string]int64{}, used: map[string]int64{}}
	for name, q := range node.Status.Allocatable {
		if v1helper.IsExtendedResourceName(name) && !skip[string(name)] {
			d.healthy[string(name)] = q.Value()
		}
	}
	if len(d.healthy) == 0 {
		return d, nil
	}
	for _, p := range active {
		need, err := devicedemand.Need(d.containers(p))
		if err != nil {
			return deviceView{}, inputErrorf("pod %s's devices cannot be counted: %v", klog.KObj(p), err)
		}
		for r, n := range need {
			d.used[r] += n
		}
	}
	return d, nil
}

// containers is pod's containers as the device manager allocates them, none
// holding devices yet.
func (d deviceView) containers(pod *v1.Pod) []devicedemand.Container {
	return devicedemand.Containers(pod,
		func(r string) bool { _, ok := d.healthy[r]; return ok },
		func(string) map[string]int64 { return nil })
}

// allocate is the allocate handler's answer for pod with the device plugins'
// devices alone (no topology or CPU policy is visible through the API):
// nil when every container gets its devices, else upstream's refusal and
// the shortfall of devices that preempting their holders could fill (none
// when the refusal is for a resource without healthy devices and nothing
// asked of it).
func (d deviceView) allocate(pod *v1.Pod) (*lifecycle.PodAdmitResult, []devicedemand.Shortage, error) {
	if len(d.healthy) == 0 {
		return nil, nil, nil
	}
	containers := d.containers(pod)
	free := map[string]int64{}
	for r, n := range d.healthy {
		free[r] = n - d.used[r]
	}
	first, err := devicedemand.FirstUnavailable(containers, d.healthy, free)
	if err != nil {
		return nil, nil, inputErrorf("pod %s's devices cannot be counted: %v", klog.KObj(pod), err)
	}
	if first == nil {
		return nil, nil, nil
	}
	need, err := devicedemand.Need(containers)
	if err != nil {
		return nil, nil, inputErrorf("pod %s's devices cannot be counted: %v", klog.KObj(pod), err)
	}
	// Held beyond what is healthy: the device manager counts only the
	// healthy devices held.
	used := map[string]int64{}
	for r, n := range d.used {
		used[r] = min(n, d.healthy[r])
	}
	res := admission.GetPodAdmitResult(deviceManagerError(first))
	return &res, devicedemand.ShortagesOf(need, d.healthy, used), nil
}

// deviceManagerError is the device manager's error for u, in its words
// (pkg/kubelet/cm/devicemanager's devicesToAllocate).
func deviceManagerError(u *devicedemand.Unavailable) error {
	if u.NoHealthy {
		return fmt.Errorf(noHealthyDevices+"%s", u.Resource)
	}
	return fmt.Errorf(devicesUnavailable+"%s. Requested: %d, Available: %d", u.Resource, u.Requested, u.Available)
}

// The device manager's refusals, up to the resource's name; a test finds
// each in the pinned upstream source.
const (
	noHealthyDevices   = "no healthy devices present; cannot allocate unhealthy devices "
	devicesUnavailable = "requested number of devices unavailable for "
)

// deviceRequests is what pod takes of each device-plugin resource of d.
func (d deviceView) deviceRequests(pod *v1.Pod) map[string]int64 {
	need, err := devicedemand.Need(d.containers(pod))
	if err != nil || len(need) == 0 {
		// Counted without error when the view was made.
		return nil
	}
	return need
}
