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
	"slices"
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
	extra     = flag.String("kubelet-flags", "", "extra flags for every kubelet, space-separated (for example --v=4 to debug)")
)

// suite is the node shared by all scenarios; each scenario resets its
// kubelet.
var suite *localnode.Node

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	if testing.Short() {
		// The suite is all or nothing; -short would pass without running it.
		fmt.Fprintln(os.Stderr, "the node e2e suite has no -short mode: run it whole, or not at all")
		return 2
	}
	if err := checkSelection(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *explainSeeds < 1 {
		// Zero would pass scenario 11 without asking critlet-explain once.
		fmt.Fprintf(os.Stderr, "-explain-seeds=%d: want at least 1\n", *explainSeeds)
		return 2
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

	// The README's local-up and local-down first, on their own nodes.
	updown, err := checkLocalUpDown(bin, state+"-updown")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(updown)
	before, err := captureHost(state)
	if err != nil {
		fmt.Fprintf(os.Stderr, "recording the host: %v\n", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	start := time.Now()
	n, err := localnode.UpRuntime(ctx, cfg)
	cancel()
	// Whatever happens, the node goes, and the host must be as it was.
	defer func() {
		if err := localnode.Down(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "removing the suite's node: %v\n", err)
			code = 1
			return
		}
		after, err := captureHost(state)
		if err == nil {
			err = hostUnchanged(before, after, "the suite")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
			return
		}
		fmt.Println("after the suite the host's sysctls, rules, node paths, processes, and the mounts, cgroups and network devices a node could make were as before")
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the suite's node: %v\n", err)
		return 1
	}
	fmt.Printf("control plane and containerd up in %s (state %s)\n", time.Since(start).Round(time.Millisecond), state)
	suite = n
	code = m.Run()
	report := results.table()
	fmt.Println(report)
	if err := os.WriteFile(*reportOut, []byte(report), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "writing the report: %v\n", err)
	}
	return code
}

// kubelets are the kubelets each scenario runs against, in order: the
// stock kubelet and critlet's with default settings, as -kubelets selects.
func kubelets() []kubeletUnderTest {
	var out []kubeletUnderTest
	for _, k := range []kubeletUnderTest{stockKubelet, critletKubelet} {
		if slices.Contains(selected(), k.name) {
			out = append(out, k)
		}
	}
	return out
}

var (
	stockKubelet   = kubeletUnderTest{name: "stock", binary: "kubelet-stock"}
	critletKubelet = kubeletUnderTest{name: "critlet", binary: "kubelet"}
)

func selected() []string {
	var names []string
	for _, n := range strings.Split(*only, ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return names
}

// checkSelection refuses a -kubelets naming anything but stock and critlet,
// so a typo cannot run zero scenarios and pass.
func checkSelection() error {
	names := selected()
	for _, n := range names {
		if n != stockKubelet.name && n != critletKubelet.name {
			return fmt.Errorf("-kubelets: unknown kubelet %q: want stock, critlet or both, comma-separated", n)
		}
	}
	return nil
}

// kubeletUnderTest is a kubelet binary with the settings it runs with.
type kubeletUnderTest struct {
	name   string   // in the report: stock, critlet, or critlet and its settings
	binary string   // in -bin, or an absolute path
	flags  []string // critlet's settings as flags
	env    []string // or as environment variables (NAME=value)
}

// with returns critlet's kubelet with non-default settings.
func (k kubeletUnderTest) with(flags, env []string) kubeletUnderTest {
	k.flags, k.env = flags, env
	k.name = strings.TrimSpace(k.name + " " + strings.Join(append(append([]string(nil), flags...), env...), " "))
	return k
}

func (k kubeletUnderTest) stock() bool { return k.binary == stockKubelet.binary }

func (k kubeletUnderTest) path() string {
	if filepath.IsAbs(k.binary) {
		return k.binary
	}
	bin, _ := filepath.Abs(*binDir)
	return filepath.Join(bin, k.binary)
}
