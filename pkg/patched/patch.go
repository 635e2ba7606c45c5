package patched

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// UpstreamModule is the module critlet patches.
const UpstreamModule = "k8s.io/kubernetes"

// Patch declares one change critlet makes to upstream.
type Patch struct {
	// Name is short and stable; logs, build errors and the kubelet's
	// settings line use it.
	Name string
	// Change says in one sentence what the patch changes.
	Change string
	// Issues are the upstream issues the patch answers.
	Issues []string
	// Setting is the kubelet flag that turns the patch on (pkg/settings
	// makes it an opt-in switch, off by default, with an environment
	// variable of the same name); empty when the patch is always on because
	// its defaults decide as the stock kubelet.
	Setting string
	// SettingHelp is the switch's --help text: what turning it on does, and
	// that off is the stock kubelet's behaviour.
	SettingHelp string
	// Package is the upstream package the patch changes, relative to
	// UpstreamModule and to this module's root (the project keeps its files
	// at the mirrored path).
	Package string
	// Replaces is true when the project's package replaces upstream's
	// whole; otherwise the project's critlet_*.go files are added to it.
	Replaces bool
	// Hooks are the upstream lines the patch appends a call to.
	Hooks []Hook
	// Proof lists calls the machine code of a patched kubelet must contain
	// (test/build follows direct calls from each From until it finds To)
	// and a stock kubelet must not.
	Proof []Reach
}

// Hook appends Call to the one line of function Func in File whose text,
// without indentation, is Line. Appending on the same line keeps every line
// number of the file as upstream's, so log lines name the same file:line as
// the stock kubelet's.
type Hook struct {
	// File is relative to the module root, in Patch.Package.
	File string
	// Func is a function name, or a method as (*Type).Name or Type.Name.
	Func string
	Line string
	Call string
}

// ID names the hook in registrations and errors: file, function.
func (h Hook) ID() string { return h.File + ":" + h.Func }

// Reach is a path of direct calls from one function to another, both named
// as the linker names them. To must be a function the compiler does not
// inline, or the call disappears into its caller.
type Reach struct{ From, To string }

// ImportPath is the upstream import path of the package the patch changes.
func (p Patch) ImportPath() string { return UpstreamModule + "/" + p.Package }

// HookIDs lists the IDs of p's hooks, in declaration order.
func (p Patch) HookIDs() []string {
	ids := make([]string, len(p.Hooks))
	for i, h := range p.Hooks {
		ids[i] = h.ID()
	}
	return ids
}

// BuildTag is the build constraint every added file carries, and the tag
// the patched build sets: an added file is a fragment of an upstream
// package that compiles only inside it, so this module's own builds, vets
// and tests must never see it.
const BuildTag = "critlet_patch"

// AddedFilePrefix starts the name of every file a patch adds to an upstream
// package, so an added file can never be mistaken for, or replace, one of
// upstream's.
const AddedFilePrefix = "critlet_"

// Identifier is the patch's name as a Go identifier.
func (p Patch) Identifier() string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(p.Name)
}

// FilePrefix starts the name of every file patch p adds to an upstream
// package: critlet_<identifier>.go or critlet_<identifier>_*.go, so that
// patches extending the same package each know their own files.
func (p Patch) FilePrefix() string { return AddedFilePrefix + p.Identifier() }

// Owns reports whether the file named base is one p adds.
func (p Patch) Owns(base string) bool {
	return base == p.FilePrefix()+".go" || strings.HasPrefix(base, p.FilePrefix()+"_") && strings.HasSuffix(base, ".go")
}

// Validate reports the first malformed declaration in patches: empty or
// repeated names, unclean package paths, a package patched twice, hooks
// with an unclean path, in a replaced package, or with an empty line or
// call, a replacement with hooks (it owns the whole package), a patch
// without proof. Several patches may extend one package, each with its own
// files and hooked files; a replaced package has one patch. Patches may
// hook the same file, never the same line. A hook may sit in another
// package than the patch's files when that is where upstream wires the
// code the patch changes (the device patches' files are in pkg/kubelet/cm,
// the handler chain they join is built in pkg/kubelet).
func Validate(patches []Patch) error {
	names := map[string]bool{}
	pkgs := map[string][]Patch{}
	for _, p := range patches {
		if p.Name == "" || strings.ContainsAny(p.Name, " \t\n,") {
			return fmt.Errorf("patch %q: the name must be non-empty, without spaces or commas", p.Name)
		}
		if names[p.Name] {
			return fmt.Errorf("patch %q declared twice", p.Name)
		}
		names[p.Name] = true
		if err := checkRelPath(p.Package); err != nil {
			return fmt.Errorf("patch %q: package: %w", p.Name, err)
		}
		for _, other := range pkgs[p.Package] {
			if p.Replaces || other.Replaces {
				return fmt.Errorf("patch %q: package %s is also patched by %q; a replaced package has no other patch", p.Name, p.Package, other.Name)
			}
			// Each extension's files are told apart by their prefix.
			a, b := p.FilePrefix()+"_", other.FilePrefix()+"_"
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return fmt.Errorf("patch %q: its files could not be told from those of %q in %s; rename one", p.Name, other.Name, p.Package)
			}
		}
		pkgs[p.Package] = append(pkgs[p.Package], p)
		if (p.Setting == "") != (p.SettingHelp == "") {
			return fmt.Errorf("patch %q: a setting and its help go together", p.Name)
		}
		if p.Change == "" || len(p.Issues) == 0 {
			return fmt.Errorf("patch %q: say what it changes and which upstream issues it answers", p.Name)
		}
		if p.Replaces && len(p.Hooks) > 0 {
			return fmt.Errorf("patch %q replaces %s whole: it has nothing to hook", p.Name, p.Package)
		}
		if !p.Replaces && len(p.Hooks) == 0 {
			return fmt.Errorf("patch %q adds files to %s but no hook calls them", p.Name, p.Package)
		}
		seen := map[string]bool{}
		for _, h := range p.Hooks {
			if err := checkRelPath(h.File); err != nil || path.Dir(h.File) == "." || path.Ext(h.File) != ".go" {
				return fmt.Errorf("patch %q: hook file %q must be a Go file of an upstream package, as a clean path", p.Name, h.File)
			}
			if h.Func == "" || strings.TrimSpace(h.Line) != h.Line || h.Line == "" || h.Call == "" || strings.Contains(h.Line+h.Call, "\n") {
				return fmt.Errorf("patch %q: hook %s: needs a function, one unindented line and one call", p.Name, h.ID())
			}
			if seen[h.ID()+h.Line] {
				return fmt.Errorf("patch %q: hook %s on %q declared twice", p.Name, h.ID(), h.Line)
			}
			seen[h.ID()+h.Line] = true
		}
		if len(p.Proof) == 0 {
			return fmt.Errorf("patch %q declares no proof", p.Name)
		}
	}
	// A replaced package has no upstream file left to hook.
	for _, p := range patches {
		for _, h := range p.Hooks {
			for _, other := range pkgs[path.Dir(h.File)] {
				if other.Replaces {
					return fmt.Errorf("patch %q: hook file %s is in %s, which %q replaces whole", p.Name, h.File, other.Package, other.Name)
				}
			}
		}
	}
	return nil
}

// HookedPackages lists the packages of p's hooked files other than
// p.Package, in declaration order, each once.
func (p Patch) HookedPackages() []string {
	var out []string
	for _, h := range p.Hooks {
		if dir := path.Dir(h.File); dir != p.Package && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return out
}

// HooksIn reports whether any of p's hooked files is directly in pkg.
func (p Patch) HooksIn(pkg string) bool {
	return slices.ContainsFunc(p.Hooks, func(h Hook) bool { return path.Dir(h.File) == pkg })
}

func checkRelPath(p string) error {
	if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || p == ".." ||
		strings.HasPrefix(p, "../") || strings.Contains(p, `\`) {
		return fmt.Errorf("%q must be a clean, slash-separated path inside the module", p)
	}
	return nil
}
