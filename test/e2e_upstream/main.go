// Command e2e-upstream runs upstream's own node e2e suite, the test binary
// compiled unmodified from the pinned module's k8s.io/kubernetes/test/e2e_node,
// against each kubelet in turn on one containerd, and compares the results
// test by test.
//
// The suite starts etcd, kube-apiserver and the kubelet itself; they and
// containerd run in a RuntimeOnly local node: private mount and network
// namespaces, the host's sysctls masked, systemd-run hidden so that the suite
// starts the kubelet directly. The host is recorded before and after, and
// must be unchanged.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// focusSets are the selections the runner knows, by name.
var focusSets = map[string]focusSet{
	"critical": {
		// CriticalPod and CriticalPodWithPodLevelResources, not the
		// eviction suite's SystemNodeCriticalPod.
		focus:    `\[sig-node\] CriticalPod`,
		timeout:  20 * time.Minute,
		allPass:  true,
		describe: "upstream's CriticalPod and CriticalPodWithPodLevelResources tests",
	},
	"conformance": {
		// Upstream's node conformance selection, with the skips of its
		// hack/make-rules/test-e2e-node.sh.
		focus:    `\[NodeConformance\]|\[NodeFeature:`,
		skip:     `\[Flaky\]|\[Slow\]|\[Serial\]`,
		procs:    8,
		recheck:  2,
		agnhost:  true,
		timeout:  4 * time.Hour,
		describe: "upstream's [NodeConformance] and [NodeFeature:…] tests",
	},
}

type focusSet struct {
	focus, skip string
	timeout     time.Duration
	// procs is how many test processes run at once: most of a pod test's
	// time is waiting, so more than the cores; upstream's runs on two-core
	// machines use 8.
	procs int
	// allPass: every test must pass on every kubelet; otherwise only the
	// kubelets must agree.
	allPass bool
	// recheck is how many times each test the kubelets differed on is run
	// again on every kubelet; only a difference that reproduces fails the
	// run. Zero for an all-pass focus: a flake there is a bug.
	recheck int
	// agnhost: the tests run agnhost's image, compiled from the pinned
	// module (CGO_ENABLED=0, as upstream's image: a compilation of its own
	// whole graph). CriticalPod's tests run pause only.
	agnhost  bool
	describe string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("e2e-upstream", flag.ContinueOnError)
	state := fs.String("state", "_output/e2e-upstream", "state directory: the node, each run's logs and reports")
	suite := fs.String("suite", "_output/bin/e2e_node.test", "upstream's node e2e test binary")
	ginkgo := fs.String("ginkgo", "_output/bin/ginkgo", "ginkgo's runner, for focus sets run in several processes")
	bin := fs.String("bin", "_output/bin", "directory holding pause")
	agnhost := fs.String("agnhost", "_output/bin/agnhost", "agnhost, compiled from the pinned module")
	kubeletList := fs.String("kubelets", "stock=_output/bin/kubelet-stock,critlet=_output/bin/kubelet", "name=binary pairs, run in this order")
	focusName := fs.String("focus", "critical", "the tests to run: critical or conformance")
	runs := fs.Int("runs", 1, "how many times to run the suite on each kubelet")
	fromJUnit := fs.Bool("from-junit", false, "run nothing: report on the JUnit reports an earlier run left (its -runs and -recheck)")
	testsFile := fs.String("tests", "", "run only the tests this file names, one JUnit name per line (of the focus's)")
	recheckRuns := fs.Int("recheck", -1, "runs of each test the kubelets differ on, again on every kubelet (default: the focus's, 2 for conformance, 0 for critical)")
	reportPath := fs.String("report", "_output/e2e-upstream-report.md", "the Markdown report; JUnit reports go beside it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	focus, ok := focusSets[*focusName]
	if !ok {
		fmt.Fprintf(os.Stderr, "e2e-upstream: unknown focus %q (want critical or conformance)\n", *focusName)
		return 2
	}
	if *runs < 1 {
		fmt.Fprintf(os.Stderr, "e2e-upstream: -runs must be at least 1, got %d\n", *runs)
		return 2
	}
	if *recheckRuns >= 0 {
		focus.recheck = *recheckRuns
	}
	kubelets, err := parseKubelets(*kubeletList)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-upstream: %v\n", err)
		return 2
	}
	paths := []*string{state, suite, ginkgo, bin, agnhost, reportPath}
	for _, p := range paths {
		if *p, err = filepath.Abs(*p); err != nil {
			fmt.Fprintf(os.Stderr, "e2e-upstream: %v\n", err)
			return 2
		}
	}
	names := kubeletNames(kubelets)
	title := "Upstream node e2e: " + focus.describe
	r := &runner{state: *state, suite: *suite, ginkgo: *ginkgo, bin: *bin, agnhost: *agnhost, focus: focus, junitDir: filepath.Join(filepath.Dir(*reportPath), "e2e-upstream-junit", *focusName)}
	if *testsFile != "" {
		if r.only, err = readTestList(*testsFile); err != nil {
			fmt.Fprintf(os.Stderr, "e2e-upstream: -tests: %v\n", err)
			return 2
		}
		title += fmt.Sprintf(" (the %d tests of %s)", len(r.only), *testsFile)
	}
	// After each run the report so far is written, marked partial, so that
	// a long run interrupted still leaves its results.
	r.progress = func(res map[string]Runs, notes []string) {
		var b strings.Builder
		writeReport(&b, title+" (PARTIAL: the runs are not over)", compare(names, res), res, nil, notes)
		if err := os.WriteFile(*reportPath, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "e2e-upstream: writing the partial report: %v\n", err)
		}
	}
	var res map[string]Runs
	var rc *Recheck
	var notes []string
	if *fromJUnit {
		res, rc, notes, err = loadJUnits(r.junitDir, kubelets, *runs, focus.recheck)
	} else {
		res, rc, notes, err = r.runAll(ctx, kubelets, *runs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-upstream: %v (a partial report may be in %s)\n", err, *reportPath)
		return 1
	}
	cmp := compare(names, res)
	var b strings.Builder
	writeReport(&b, title, cmp, res, rc, notes)
	if err := os.WriteFile(*reportPath, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "e2e-upstream: writing the report: %v\n", err)
		return 1
	}
	fmt.Print(b.String())
	fmt.Printf("\nreport: %s\n", *reportPath)
	if problems := verdict(focus, cmp, res, rc); len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "e2e-upstream: FAILED:\n  %s\n", strings.Join(problems, "\n  "))
		return 1
	}
	return 0
}

// parseKubelets reads -kubelets: name=binary pairs, each binary present.
func parseKubelets(s string) ([]kubelet, error) {
	var out []kubelet
	seen := map[string]bool{}
	for _, pair := range strings.Split(s, ",") {
		name, bin, ok := strings.Cut(pair, "=")
		if !ok || name == "" || bin == "" {
			return nil, fmt.Errorf("-kubelets: %q is not name=binary", pair)
		}
		if seen[name] {
			return nil, fmt.Errorf("-kubelets: %q named twice", name)
		}
		seen[name] = true
		abs, err := filepath.Abs(bin)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("-kubelets: %s: %w (make kubelet kubelet-stock builds them)", name, err)
		}
		out = append(out, kubelet{name, abs})
	}
	return out, nil
}

// readTestList reads test names, one per line; blank lines and lines
// starting with # are left out.
func readTestList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s names no test", path)
	}
	return names, nil
}
