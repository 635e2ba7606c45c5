package devicedemand

import (
	v1 "k8s.io/api/core/v1"
)

// Containers returns pod's containers in the order the device manager
// allocates them (init containers in spec order, then app containers),
// each with the limits of the resources isDevice accepts (the device
// manager reads limits; extended resources' requests equal them) and what
// held reports it already holds. isDevice says whether a resource is a
// device-plugin resource; held(container) gives, per resource, how many
// devices the container holds. O(containers × resources).
func Containers(pod *v1.Pod, isDevice func(resource string) bool, held func(container string) map[string]int64) []Container {
	out := make([]Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	add := func(c *v1.Container, kind Kind) {
		devices := map[string]int64{}
		for name, q := range c.Resources.Limits {
			if isDevice(string(name)) {
				devices[string(name)] = q.Value()
			}
		}
		h := map[string]int64{}
		for r, n := range held(c.Name) {
			if n > 0 {
				h[r] = n
			}
		}
		out = append(out, Container{Name: c.Name, Kind: kind, Devices: devices, Held: h})
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := Init
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			kind = Sidecar
		}
		add(c, kind)
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], App)
	}
	return out
}
