// Package overlay plans the file overlay that go build -overlay applies to
// a copy of the upstream Kubernetes module so that the patches declared in
// pkg/patched are compiled into upstream's packages, under upstream's import
// paths, without a copy of any upstream file in this repository.
//
// Planning (Build) reads the upstream copy and the repository and touches
// nothing; the plan holds the overlay and the generated files (hooked copies
// of upstream files, one registration file per patch). Apply writes them.
package overlay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/critlet/critlet/internal/atomicfile"
	"github.com/critlet/critlet/pkg/patched"
)

// File is the document go build -overlay reads: each key is a file the build
// would see, each value the file to read instead ("" deletes the key's file).
type File struct {
	Replace map[string]string `json:"Replace"`
}

// Plan is what the build needs for a set of patches: the overlay, and the
// files it points to that must be generated first (absolute paths under the
// generation directory, with their contents).
type Plan struct {
	Overlay   File
	Generated map[string][]byte
}

// SourceRoot is where the repository keeps every file compiled under
// upstream's import paths: SourceRoot/k8s.io/kubernetes/<Patch.Package>.
// Nothing else lives there, and nothing compiled that way lives elsewhere.
var SourceRoot = filepath.Join("overlay", filepath.FromSlash(patched.UpstreamModule))

// Build plans the overlay for patches, read from upstreamDir (the copy of
// the upstream module the build uses) and srcDir (the repository's
// SourceRoot, which keeps each patch's files at the upstream path).
// Generated files go under genDir. Every error names the patch it comes
// from; a package directory under srcDir that no patch declares is an
// error too, so no file there is silently left out of the build.
func Build(upstreamDir, srcDir, genDir string, patches []patched.Patch) (*Plan, error) {
	if len(patches) == 0 {
		return nil, errors.New("no patches declared")
	}
	if err := patched.Validate(patches); err != nil {
		return nil, err
	}
	var err error
	if upstreamDir, err = filepath.Abs(upstreamDir); err != nil {
		return nil, fmt.Errorf("resolving upstream directory: %w", err)
	}
	if srcDir, err = filepath.Abs(srcDir); err != nil {
		return nil, fmt.Errorf("resolving the patches' source directory: %w", err)
	}
	if genDir, err = filepath.Abs(genDir); err != nil {
		return nil, fmt.Errorf("resolving generation directory: %w", err)
	}
	plan := &Plan{Overlay: File{Replace: map[string]string{}}, Generated: map[string][]byte{}}
	byPackage := map[string][]patched.Patch{}
	for _, p := range patches {
		byPackage[p.Package] = append(byPackage[p.Package], p)
	}
	if err := checkDeclared(srcDir, byPackage); err != nil {
		return nil, err
	}
	for _, p := range patches {
		if err := planPatch(plan, upstreamDir, srcDir, genDir, p, byPackage[p.Package]); err != nil {
			return nil, fmt.Errorf("patch %s: %w", p.Name, err)
		}
	}
	if err := planHooks(plan, upstreamDir, genDir, patches); err != nil {
		return nil, err
	}
	return plan, nil
}

// planHooks adds the hooked copies of upstream files to plan. Patches may
// hook the same file: it is hooked once with all of their hooks (a line
// hooked twice is an error), and each patch's hooks register themselves
// from the file they are in, through a registrar generated into the hooked
// file's package when that is not the patch's own.
func planHooks(plan *Plan, upstreamDir, genDir string, patches []patched.Patch) error {
	byFile := map[string][]hooksOf{}
	var files []string
	for _, p := range patches {
		mine := map[string][]patched.Hook{}
		var order []string
		for _, h := range p.Hooks {
			if mine[h.File] == nil {
				order = append(order, h.File)
			}
			mine[h.File] = append(mine[h.File], h)
		}
		for _, f := range order {
			if byFile[f] == nil {
				files = append(files, f)
			}
			byFile[f] = append(byFile[f], hooksOf{p, mine[f]})
		}
	}
	for _, f := range files {
		up := filepath.Join(upstreamDir, filepath.FromSlash(f))
		src, err := os.ReadFile(up)
		if err != nil {
			return fmt.Errorf("patch %s: hooked file %s: %w", byFile[f][0].patch.Name, f, err)
		}
		var all []patched.Hook
		for _, ph := range byFile[f] {
			all = append(all, ph.hooks...)
		}
		out, err := ApplyHooks(f, src, all)
		if err != nil {
			return fmt.Errorf("patch %s: %w", patchOf(byFile[f], err), err)
		}
		if !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		for _, ph := range byFile[f] {
			out = append(out, hookInit(ph.patch, ph.hooks)...)
		}
		gen := filepath.Join(genDir, filepath.FromSlash(f))
		plan.Overlay.Replace[up] = gen
		plan.Generated[gen] = out
	}
	for _, p := range patches {
		for _, pkg := range p.HookedPackages() {
			if err := planHookRegistrar(plan, upstreamDir, genDir, p, pkg); err != nil {
				return fmt.Errorf("patch %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// planHookRegistrar generates p's registrar into pkg, a package p hooks
// but whose files are not p's.
func planHookRegistrar(plan *Plan, upstreamDir, genDir string, p patched.Patch, pkg string) error {
	upPkg := filepath.Join(upstreamDir, filepath.FromSlash(pkg))
	stock, err := goFiles(upPkg)
	if err != nil {
		return fmt.Errorf("hooked package %s: %w", pkg, err)
	}
	name, err := packageName(filepath.Join(upPkg, stock[0]))
	if err != nil {
		return fmt.Errorf("hooked package %s: %w", pkg, err)
	}
	key := filepath.Join(upPkg, hookRegistrationFile(p))
	if _, taken := plan.Overlay.Replace[key]; taken {
		return fmt.Errorf("%s is planned twice; the build generates it", key)
	}
	gen := filepath.Join(genDir, filepath.FromSlash(pkg), hookRegistrationFile(p))
	plan.Overlay.Replace[key] = gen
	plan.Generated[gen] = hookRegistrationSource(name, p)
	return nil
}

// patchOf names the patch whose hook err is about, or every patch hooking
// the file when err is about the file as a whole.
func patchOf(of []hooksOf, err error) string {
	var he *HookError
	hookErr := errors.As(err, &he)
	var names []string
	for _, ph := range of {
		if hookErr && slices.Contains(ph.hooks, he.Hook) {
			return ph.patch.Name
		}
		names = append(names, ph.patch.Name)
	}
	return strings.Join(names, ", ")
}

// hooksOf is one patch's hooks in one file.
type hooksOf struct {
	patch patched.Patch
	hooks []patched.Hook
}

// planPatch adds p to plan: its files and its registration; mates are the
// patches of p's package, p included.
func planPatch(plan *Plan, upstreamDir, srcDir, genDir string, p patched.Patch, mates []patched.Patch) error {
	upPkg := filepath.Join(upstreamDir, filepath.FromSlash(p.Package))
	repoPkg := filepath.Join(srcDir, filepath.FromSlash(p.Package))
	var pkgName string
	var err error
	if p.Replaces {
		pkgName, err = replacePackage(plan, upPkg, repoPkg)
	} else {
		pkgName, err = extendPackage(plan, upPkg, repoPkg, p, mates)
	}
	if err != nil {
		return err
	}
	reg := filepath.Join(upPkg, registrationFile(p))
	if _, taken := plan.Overlay.Replace[reg]; taken {
		return fmt.Errorf("the project has a file named %s, which the build generates", filepath.Base(reg))
	}
	gen := filepath.Join(genDir, filepath.FromSlash(p.Package), registrationFile(p))
	plan.Overlay.Replace[reg] = gen
	plan.Generated[gen] = registrationSource(pkgName, p)

	return nil
}

// JSON returns the overlay as go build -overlay expects it, with keys sorted
// so that equal overlays are byte-for-byte equal.
func (f *File) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("encoding overlay: %w", err)
	}
	return buf.Bytes(), nil
}

// Apply writes the plan: its generated files, removing any other file
// under genDir (the directory belongs to the build), then the overlay file
// at out. Unchanged files are left alone, so their times keep meaning
// something to go's cache and to make.
func (p *Plan) Apply(genDir, out string) error {
	genDir, err := filepath.Abs(genDir)
	if err != nil {
		return fmt.Errorf("resolving generation directory: %w", err)
	}
	for path, data := range p.Generated {
		if rel, err := filepath.Rel(genDir, path); err != nil || !filepath.IsLocal(rel) {
			return fmt.Errorf("generated file %s is outside %s", path, genDir)
		}
		if err := writeIfChanged(path, data); err != nil {
			return err
		}
	}
	err = filepath.WalkDir(genDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if _, keep := p.Generated[path]; !keep {
				if err := os.Remove(path); err != nil {
					return fmt.Errorf("removing stale generated file: %w", err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cleaning %s: %w", genDir, err)
	}
	data, err := p.Overlay.JSON()
	if err != nil {
		return err
	}
	return writeIfChanged(out, data)
}

func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating directory for %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
