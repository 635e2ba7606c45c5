package patched

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Registration is what a patch's generated code reports from init: the
// import path its package was compiled under (from the registration file)
// and the hooks applied (from each hooked file itself, so a build whose
// overlay lacks a hooked file lacks its registration too).
type Registration struct {
	ImportPath string
	Hooks      []string
}

var (
	mu         sync.Mutex
	registered = map[string]Registration{}
)

// Register records that patch name is linked into the binary. The file the
// build generates into each patched package calls it from init with the
// package's own import path, found through a type's PkgPath.
func Register(name, importPath string) {
	mu.Lock()
	defer mu.Unlock()
	r := registered[name]
	r.ImportPath = importPath
	registered[name] = r
}

// RegisterHook records that hook id of patch name is applied: the line the
// build appends to each hooked file calls it from init.
func RegisterHook(name, id string) {
	mu.Lock()
	defer mu.Unlock()
	r := registered[name]
	r.Hooks = append(r.Hooks, id)
	slices.Sort(r.Hooks)
	registered[name] = r
}

// Registered returns the registrations, by patch name.
func Registered() map[string]Registration {
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]Registration, len(registered))
	for k, v := range registered {
		v.Hooks = slices.Clone(v.Hooks)
		out[k] = v
	}
	return out
}

// Verify reports an error naming every declared patch that is not linked in
// exactly as declared: registered under its upstream import path with every
// declared hook applied.
func Verify() error { return verify(Patches, Registered()) }

func verify(patches []Patch, got map[string]Registration) error {
	var problems []string
	for _, p := range patches {
		r, ok := got[p.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (%s) is missing", p.Name, p.ImportPath()))
		case r.ImportPath == "":
			problems = append(problems, fmt.Sprintf("%s has hooks but not its files", p.Name))
		case r.ImportPath != p.ImportPath():
			problems = append(problems, fmt.Sprintf("%s is linked as %s, not in place of %s", p.Name, r.ImportPath, p.ImportPath()))
		case !slices.Equal(r.Hooks, sorted(p.HookIDs())):
			problems = append(problems, fmt.Sprintf("%s has hooks [%s], want [%s]", p.Name, strings.Join(r.Hooks, " "), strings.Join(sorted(p.HookIDs()), " ")))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("this binary was built without critlet's patches as declared: %s: it would run stock upstream code; build it with 'make kubelet'",
		strings.Join(problems, "; "))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
