package preemption

import (
	"reflect"

	"github.com/critlet/critlet/pkg/patched"
)

func init() {
	// The package path is the upstream one only when the build's overlay put
	// these files in place of upstream's; see patched.Verify.
	patched.Register(reflect.TypeFor[CriticalPodAdmissionHandler]().PkgPath(),
		"critical-pod admission: victims chosen by github.com/critlet/critlet/pkg/kubelet/preemption/victims")
}
