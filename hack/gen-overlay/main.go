// Command gen-overlay writes the go build -overlay file that swaps critlet's
// replacement packages (declared in pkg/patched) into a copy of the upstream
// Kubernetes module.
//
//	go run ./hack/gen-overlay -upstream _output/upstream/kubernetes@v1.37.2 -repo . -o _output/build/overlay.json
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/critlet/critlet/internal/atomicfile"
	"github.com/critlet/critlet/internal/overlay"
	"github.com/critlet/critlet/pkg/patched"
)

func main() {
	upstream := flag.String("upstream", "", "directory of the upstream k8s.io/kubernetes copy the build uses")
	repo := flag.String("repo", ".", "root of this repository")
	out := flag.String("o", "", "overlay file to write")
	flag.Parse()
	if *upstream == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: gen-overlay -upstream DIR [-repo DIR] -o FILE")
		os.Exit(2)
	}
	if err := run(*upstream, *repo, *out); err != nil {
		fmt.Fprintf(os.Stderr, "gen-overlay: %v\n", err)
		os.Exit(1)
	}
}

func run(upstream, repo, out string) error {
	f, err := overlay.Generate(upstream, repo, patched.Packages)
	if err != nil {
		return err
	}
	data, err := f.JSON()
	if err != nil {
		return err
	}
	// Leave an unchanged file alone so its timestamp keeps meaning something.
	if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("creating output directory: %w", err)
	}
	if err := atomicfile.WriteFile(out, data, 0o644); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}
