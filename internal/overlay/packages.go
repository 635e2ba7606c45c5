package overlay

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/critlet/critlet/pkg/patched"
)

// nonGoSources are the extensions of files the go command compiles besides Go
// files. A package that has any cannot be swapped by replacing Go files alone,
// so planning refuses it rather than build a half-replaced package.
var nonGoSources = map[string]bool{
	".s": true, ".S": true, ".sx": true, ".c": true, ".cc": true, ".cpp": true,
	".cxx": true, ".m": true, ".h": true, ".hh": true, ".hpp": true, ".hxx": true,
	".f": true, ".F": true, ".for": true, ".f90": true, ".swig": true,
	".swigcxx": true, ".syso": true,
}

// replacePackage plans deleting every non-test Go file of the upstream
// package and adding the project's files of the same package, so the
// package keeps its upstream import path and every upstream caller links
// the project's code. It returns the package's name.
func replacePackage(plan *Plan, upPkg, repoPkg string) (string, error) {
	stock, err := goFiles(upPkg)
	if err != nil {
		return "", fmt.Errorf("upstream package: %w", err)
	}
	ours, err := goFiles(repoPkg)
	if err != nil {
		return "", fmt.Errorf("replacement package: %w", err)
	}
	for _, name := range stock {
		plan.Overlay.Replace[filepath.Join(upPkg, name)] = ""
	}
	// A project file named like an upstream one overrides its deletion.
	for _, name := range ours {
		plan.Overlay.Replace[filepath.Join(upPkg, name)] = filepath.Join(repoPkg, name)
	}
	return packageName(filepath.Join(repoPkg, ours[0]))
}

// extendPackage plans adding p's files (patched.Patch.Owns) to the
// upstream package, leaving upstream's own untouched. Every project file in
// the directory must be named critlet_*.go, have no upstream namesake and
// belong to one of the patches extending the package (mates, p included),
// so no file is left out unnoticed. It returns the package's name.
func extendPackage(plan *Plan, upPkg, repoPkg string, p patched.Patch, mates []patched.Patch) (string, error) {
	stock, err := goFiles(upPkg)
	if err != nil {
		return "", fmt.Errorf("upstream package: %w", err)
	}
	ours, err := goFiles(repoPkg)
	if err != nil {
		return "", fmt.Errorf("added files: %w", err)
	}
	added := 0
	upstream := map[string]bool{}
	for _, name := range stock {
		upstream[name] = true
	}
	for _, name := range ours {
		if !strings.HasPrefix(name, patched.AddedFilePrefix) {
			return "", fmt.Errorf("%s: a file added to an upstream package must be named %s*.go", filepath.Join(repoPkg, name), patched.AddedFilePrefix)
		}
		if upstream[name] {
			return "", fmt.Errorf("%s: upstream has a file of that name; an added file may not replace one", filepath.Join(repoPkg, name))
		}
		if !slices.ContainsFunc(mates, func(m patched.Patch) bool { return m.Owns(name) }) {
			return "", fmt.Errorf("%s: no patch of %s owns this file; name it %s*.go after its patch", filepath.Join(repoPkg, name), p.Package, patched.AddedFilePrefix)
		}
		if !p.Owns(name) {
			continue
		}
		if err := checkBuildTag(filepath.Join(repoPkg, name)); err != nil {
			return "", err
		}
		plan.Overlay.Replace[filepath.Join(upPkg, name)] = filepath.Join(repoPkg, name)
		added++
	}
	if added == 0 {
		return "", fmt.Errorf("no file of %s in %s: want %s.go or %s_*.go", p.Name, repoPkg, p.FilePrefix(), p.FilePrefix())
	}
	// The patch's tests join upstream's in the package, where they reach
	// its unexported code and upstream's test helpers; go build ignores
	// them, go test with the overlay compiles them.
	tests, err := testFiles(repoPkg)
	if err != nil {
		return "", err
	}
	for _, name := range tests {
		if !slices.ContainsFunc(mates, func(m patched.Patch) bool { return m.Owns(name) }) {
			return "", fmt.Errorf("%s: no patch of %s owns this test file; name it %s<patch>_*_test.go", filepath.Join(repoPkg, name), p.Package, patched.AddedFilePrefix)
		}
		if !p.Owns(name) {
			continue
		}
		if err := checkBuildTag(filepath.Join(repoPkg, name)); err != nil {
			return "", err
		}
		plan.Overlay.Replace[filepath.Join(upPkg, name)] = filepath.Join(repoPkg, name)
	}
	return packageName(filepath.Join(upPkg, stock[0]))
}

// checkDeclared fails on a directory under srcDir holding Go files that no
// patch's Package names: the build would never compile them, and a reader
// of the tree would take them for a patch.
func checkDeclared(srcDir string, byPackage map[string][]patched.Patch) error {
	return filepath.WalkDir(srcDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading the patches' source directory: %w", err)
		}
		if d.IsDir() || filepath.Ext(path) != ".go" {
			return nil
		}
		rel, err := filepath.Rel(srcDir, filepath.Dir(path))
		if err != nil {
			return err
		}
		if byPackage[filepath.ToSlash(rel)] == nil {
			return fmt.Errorf("%s: no patch declares package %s; declare it in pkg/patched or move the file out of %s", path, filepath.ToSlash(rel), srcDir)
		}
		return nil
	})
}

// testFiles lists the Go test files directly in dir.
func testFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading package directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, "_test.go") && !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "_") {
			names = append(names, name)
		}
	}
	return names, nil
}

// goFiles lists the non-test Go files directly in dir (os.ReadDir sorts them)
// and fails when there are none or when dir holds other compiled sources.
func goFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading package directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		// The go command ignores these names, so the overlay does too.
		if e.IsDir() || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		ext := filepath.Ext(name)
		if nonGoSources[ext] {
			return nil, fmt.Errorf("%s: non-Go source files are not supported by the overlay", filepath.Join(dir, name))
		}
		if ext != ".go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no non-test Go files in %s", dir)
	}
	return names, nil
}

func packageName(file string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly)
	if err != nil {
		return "", fmt.Errorf("reading the package name: %w", err)
	}
	return f.Name.Name, nil
}

// checkBuildTag requires file's build constraint to be exactly
// patched.BuildTag.
func checkBuildTag(file string) error {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	want := "//go:build " + patched.BuildTag
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) {
				if strings.TrimSpace(c.Text) != want {
					return fmt.Errorf("%s: build constraint %q, want %q", file, c.Text, want)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("%s: an added file must start with %q, so that only the patched build compiles it", file, want)
}
