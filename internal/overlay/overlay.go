// Package overlay computes the file overlay that go build -overlay applies to
// a copy of the upstream Kubernetes module so that critlet's replacement
// packages are compiled in place of upstream's.
//
// For each replaced package the overlay deletes every non-test Go file of the
// upstream package and adds the project's files of the same package under the
// upstream directory, so the package keeps its upstream import path and every
// upstream caller links the project's code without a source change.
package overlay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File is the document go build -overlay reads: each key is a file the build
// would see, each value the file to read instead ("" deletes the key's file).
type File struct {
	Replace map[string]string `json:"Replace"`
}

// nonGoSources are the extensions of files the go command compiles besides Go
// files. A package that has any cannot be swapped by replacing Go files alone,
// so generation refuses it rather than build a half-replaced package.
var nonGoSources = map[string]bool{
	".s": true, ".S": true, ".sx": true, ".c": true, ".cc": true, ".cpp": true,
	".cxx": true, ".m": true, ".h": true, ".hh": true, ".hpp": true, ".hxx": true,
	".f": true, ".F": true, ".for": true, ".f90": true, ".swig": true,
	".swigcxx": true, ".syso": true,
}

// Generate returns the overlay that replaces each package in pkgs. Package
// paths are slash-separated and relative to both upstreamDir (the copy of the
// upstream module) and repoDir (this project's root), which mirrors upstream's
// layout for its replacements. Only files directly in each package directory
// count: subdirectories are separate packages.
func Generate(upstreamDir, repoDir string, pkgs []string) (*File, error) {
	if len(pkgs) == 0 {
		return nil, errors.New("no packages declared for replacement")
	}
	upstreamDir, err := filepath.Abs(upstreamDir)
	if err != nil {
		return nil, fmt.Errorf("resolving upstream directory: %w", err)
	}
	repoDir, err = filepath.Abs(repoDir)
	if err != nil {
		return nil, fmt.Errorf("resolving repository directory: %w", err)
	}

	out := &File{Replace: map[string]string{}}
	seen := map[string]bool{}
	for _, pkg := range pkgs {
		if err := checkPackagePath(pkg); err != nil {
			return nil, err
		}
		if seen[pkg] {
			return nil, fmt.Errorf("package %q declared twice", pkg)
		}
		seen[pkg] = true

		upstreamPkg := filepath.Join(upstreamDir, filepath.FromSlash(pkg))
		repoPkg := filepath.Join(repoDir, filepath.FromSlash(pkg))
		stock, err := goFiles(upstreamPkg)
		if err != nil {
			return nil, fmt.Errorf("upstream package %s: %w", pkg, err)
		}
		ours, err := goFiles(repoPkg)
		if err != nil {
			return nil, fmt.Errorf("replacement package %s: %w", pkg, err)
		}
		for _, name := range stock {
			out.Replace[filepath.Join(upstreamPkg, name)] = ""
		}
		// A project file named like an upstream one overrides its deletion.
		for _, name := range ours {
			out.Replace[filepath.Join(upstreamPkg, name)] = filepath.Join(repoPkg, name)
		}
	}
	return out, nil
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

func checkPackagePath(pkg string) error {
	if pkg == "" || pkg == "." || path.IsAbs(pkg) || path.Clean(pkg) != pkg ||
		strings.HasPrefix(pkg, "../") || pkg == ".." || strings.Contains(pkg, `\`) {
		return fmt.Errorf("package path %q must be a clean, slash-separated path inside the module", pkg)
	}
	return nil
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
