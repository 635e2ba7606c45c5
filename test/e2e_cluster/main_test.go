//go:build e2ecluster

package e2ecluster

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var (
	stateDir   = flag.String("state", "", "the suite's state directory (its cluster, report and logs)")
	repo       = flag.String("repo", "../..", "the repository")
	imageCache = flag.String("image-cache", "", "where the machine image is kept between runs (default: the repository's _output/cluster-image)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e-cluster: needs root (machines, cgroups, network namespaces)")
		os.Exit(1)
	}
	if *stateDir == "" {
		fmt.Fprintln(os.Stderr, "e2e-cluster: -state is required")
		os.Exit(1)
	}
	if err := os.MkdirAll(*stateDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := filepath.Abs(*repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*repo = r
	if *imageCache == "" {
		*imageCache = filepath.Join(r, "_output/cluster-image")
	}
	os.Exit(m.Run())
}
