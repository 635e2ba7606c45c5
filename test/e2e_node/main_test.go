//go:build e2enode

// Package e2enode runs critical-pod admission scenarios on a real local
// node (etcd, kube-apiserver, containerd with runc) against two kubelets:
// upstream's, and critlet's. Every scenario runs on a fresh node once per
// kubelet; the suite ends with a table of scenario × kubelet.
//
// It needs root and the binaries `make test-e2e-node` builds:
//
//	go test -tags e2enode -v ./test/e2e_node/
package e2enode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/localnode"
)

var (
	stateDir  = flag.String("state", "../../_output/e2e-node", "state directory of the suite's node")
	binDir    = flag.String("bin", "../../_output/bin", "directory holding etcd, kube-apiserver, pause and both kubelets")
	reportOut = flag.String("report", "../../_output/e2e-node-report.md", "where the result table is written")
	only      = flag.String("kubelets", "stock,critlet", "kubelets to run, comma-separated: stock, critlet")
)

// suite is the node shared by all scenarios; each scenario resets its
// kubelet.
var suite *localnode.Node

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if testing.Short() {
		fmt.Println("node e2e skipped in -short mode")
		return 0
	}
	state, err1 := filepath.Abs(*stateDir)
	bin, err2 := filepath.Abs(*binDir)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "bad -state or -bin:", err1, err2)
		return 2
	}
	cfg := localnode.Config{
		StateDir: state,
		BinDir:   bin,
		Kubelet:  filepath.Join(bin, "kubelet"),
		// A victim whose runtime cannot stop it would otherwise hold a CRI
		// call, and the pod worker, for the default two minutes.
		RuntimeRequestTimeout: 30 * time.Second,
	}
	runtimeDir, err := os.MkdirTemp("", "critlet-e2e-runtime-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(runtimeDir)
	unstoppable, err = writeUnstoppableRuntime(runtimeDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.RuntimeHandlers = map[string]string{unstoppableHandler: unstoppable.binary}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	start := time.Now()
	n, err := localnode.UpRuntime(ctx, cfg)
	cancel()
	// Whatever happens, the node goes: tests must leave nothing behind.
	defer func() {
		if err := localnode.Down(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "removing the suite's node: %v\n", err)
		}
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the suite's node: %v\n", err)
		return 1
	}
	fmt.Printf("control plane and containerd up in %s (state %s)\n", time.Since(start).Round(time.Millisecond), state)
	suite = n
	code := m.Run()
	report := results.table()
	fmt.Println(report)
	if err := os.WriteFile(*reportOut, []byte(report), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "writing the report: %v\n", err)
	}
	return code
}

// kubelets are the kubelets each scenario runs against, in order.
func kubelets() []kubeletUnderTest {
	all := []kubeletUnderTest{
		{name: "stock", binary: "kubelet-stock"},
		{name: "critlet", binary: "kubelet"},
	}
	var out []kubeletUnderTest
	for _, k := range all {
		for _, want := range strings.Split(*only, ",") {
			if strings.TrimSpace(want) == k.name {
				out = append(out, k)
			}
		}
	}
	return out
}

type kubeletUnderTest struct {
	name   string
	binary string
}

func (k kubeletUnderTest) path() string {
	bin, _ := filepath.Abs(*binDir)
	return filepath.Join(bin, k.binary)
}
