// Package patched declares which upstream Kubernetes packages critlet replaces
// and lets a binary prove, at run time, that the replacements were linked in.
//
// The build swaps the project's package files in place of upstream's with
// go build -overlay. A binary built without the overlay still compiles
// (upstream's packages are complete), so the kubelet main asks this package
// whether every declared replacement registered itself under its upstream
// import path, and refuses to start otherwise.
package patched

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// UpstreamModule is the module whose packages are replaced.
const UpstreamModule = "k8s.io/kubernetes"

// Patch declares one change critlet makes to upstream: what it replaces and
// how the built binary proves it is in the code the kubelet runs.
type Patch struct {
	// Name is short and stable; logs and build errors use it.
	Name string
	// Package is the upstream package replaced whole, relative to both
	// UpstreamModule and this module's root (the project keeps each
	// replacement at the mirrored path).
	Package string
	// Proof lists the calls the machine code of a patched kubelet must
	// contain (test/build follows direct calls from each From until it
	// finds To) and a stock kubelet must not.
	Proof []Reach
}

// Reach is a path of direct calls from one function to another, both named
// as the linker names them. To must be a function the compiler does not
// inline, or the call disappears into its caller.
type Reach struct{ From, To string }

// Patches is the one declaration of critlet's changes to upstream: the
// overlay generator, the build checks and the kubelet main all read it.
var Patches = []Patch{
	{
		Name:    "critical-pod-admission",
		Package: "pkg/kubelet/preemption",
		Proof: []Reach{{
			From: UpstreamModule + "/pkg/kubelet/preemption.(*CriticalPodAdmissionHandler).HandleAdmissionFailure",
			To:   "github.com/critlet/critlet/pkg/kubelet/preemption/victims.Select",
		}},
	},
}

// Packages lists the replaced packages of Patches, relative to
// UpstreamModule.
var Packages = packagesOf(Patches)

func packagesOf(patches []Patch) []string {
	var out []string
	for _, p := range patches {
		if p.Package != "" {
			out = append(out, p.Package)
		}
	}
	return out
}

var (
	mu         sync.Mutex
	registered = map[string]string{}
)

// Register records that the calling package is linked into the binary under
// importPath, with a short description of what it changes. Replacement
// packages call it from init with their own import path (found through a
// type's PkgPath), which is the upstream path only when the overlay applied.
func Register(importPath, description string) {
	mu.Lock()
	defer mu.Unlock()
	registered[importPath] = description
}

// Registered returns the import paths that registered, with their
// descriptions.
func Registered() map[string]string {
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]string, len(registered))
	for k, v := range registered {
		out[k] = v
	}
	return out
}

// Verify reports an error naming every declared package whose replacement is
// not linked in under its upstream import path.
func Verify() error {
	got := Registered()
	var missing []string
	for _, rel := range Packages {
		if _, ok := got[UpstreamModule+"/"+rel]; !ok {
			missing = append(missing, UpstreamModule+"/"+rel)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return fmt.Errorf("this binary was built without critlet's patches for %s: it would run stock upstream code; build it with 'make kubelet'",
		strings.Join(missing, ", "))
}
