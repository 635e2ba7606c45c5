//go:build e2ekubeadm

package e2ekubeadm

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var (
	binDir     = flag.String("bin-dir", "../../_output/bin", "where make put kubeadm, the control plane, both kubelets and pause")
	packageDir = flag.String("package-dir", "../../_output/package", "where make package put critlet's .deb")
	stateDir   = flag.String("state", "", "the suite's state directory (absolute): its node, logs and the kubelets' installed roots")
)

func TestMain(m *testing.M) {
	// The suite's binary is also the API server's port forwarder inside the
	// node's network namespace (proxy_test.go).
	if spec, ok := os.LookupEnv(proxyEnv); ok {
		if err := runProxy(spec); err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	// What runs in the node starts in a directory of its own.
	for _, p := range []*string{binDir, packageDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		*p = abs
	}
	os.Exit(m.Run())
}
