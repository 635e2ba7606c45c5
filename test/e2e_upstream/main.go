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
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/hoststate"
	"github.com/critlet/critlet/internal/localnode"
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
	recheck  int
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

// verdict lists what makes the run a failure: any difference between the
// kubelets (with a recheck, any that reproduced), and for an all-pass focus
// any test that did not pass.
func verdict(focus focusSet, cmp Comparison, res map[string]Runs, rc *Recheck) []string {
	var problems []string
	differences := cmp.Differences
	if rc != nil {
		differences = rc.Reproduced
	}
	for _, t := range differences {
		problems = append(problems, "kubelets differ on "+t)
	}
	if !focus.allPass {
		var unexplained []string
		for t, c := range machineFailures(cmp, res) {
			if c == "" {
				unexplained = append(unexplained, t)
			}
		}
		sort.Strings(unexplained)
		for _, t := range unexplained {
			problems = append(problems, "no kubelet passes, and no cause on this machine explains it (add one to causes.go once found): "+t)
		}
	}
	// A run that selected nothing would otherwise pass by comparing nothing.
	for _, k := range cmp.Kubelets {
		if len(res[k]) == 0 {
			problems = append(problems, k+": no run")
		}
		for i, run := range res[k] {
			if len(run) == 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: no test ran", k, i+1))
			}
		}
	}
	if focus.allPass {
		for _, k := range cmp.Kubelets {
			for i, run := range res[k] {
				for t, r := range run {
					if r.Outcome != Passed {
						problems = append(problems, fmt.Sprintf("%s run %d: %s %s: %s", k, i+1, t, r.Outcome, firstLine(r.Reason)))
					}
				}
			}
		}
	}
	return problems
}

// loadJUnits reads the JUnit reports runs and rechecks left in dir, as
// runKubelets names them, instead of running the suite.
func loadJUnits(dir string, kubelets []kubelet, runs, rechecks int) (map[string]Runs, *Recheck, []string, error) {
	read := func(label string, into map[string]Runs) error {
		for _, k := range kubelets {
			path := filepath.Join(dir, k.name+"-"+label+".xml")
			results, err := readJUnit(path)
			if err != nil {
				return err
			}
			into[k.name] = append(into[k.name], results)
		}
		return nil
	}
	res := map[string]Runs{}
	for i := 1; i <= runs; i++ {
		if err := read(strconv.Itoa(i), res); err != nil {
			return nil, nil, nil, err
		}
	}
	notes := []string{fmt.Sprintf("Rendered from the JUnit reports in %s (%d run(s) per kubelet).", dir, runs)}
	for _, k := range kubelets {
		out, err := exec.Command(k.binary, "--version").Output()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s --version: %w", k.binary, err)
		}
		notes = append(notes, fmt.Sprintf("%s: %s (%s now; the reports do not say which build ran)", k.name, k.binary, strings.TrimSpace(string(out))))
	}
	if _, err := os.Stat(filepath.Join(dir, kubelets[0].name+"-recheck-1.xml")); err != nil || rechecks == 0 {
		return res, nil, notes, nil
	}
	again := map[string]Runs{}
	for i := 1; i <= rechecks; i++ {
		if err := read(fmt.Sprintf("recheck-%d", i), again); err != nil {
			return nil, nil, nil, err
		}
	}
	names := kubeletNames(kubelets)
	return res, recheck(compare(names, res), again), notes, nil
}

type kubelet struct{ name, binary string }

// kubeletNames are the kubelets' names, in order: the report's columns.
func kubeletNames(kubelets []kubelet) []string {
	names := make([]string, len(kubelets))
	for i, k := range kubelets {
		names[i] = k.name
	}
	return names
}

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

type runner struct {
	state, suite, ginkgo, bin, agnhost string
	// junitDir receives ginkgo's JUnit report of each run.
	junitDir string
	// progress receives the results so far after each run.
	progress func(map[string]Runs, []string)
	focus    focusSet
	// selected are the tests the focus selects, from a dry run.
	selected []string
	// only, when set, restricts the runs to these of the selected tests.
	only []string
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

// runAll brings up the node, runs the suite runs times on each kubelet,
// alternating, rechecks the differences, and takes the node down. The host
// must be as it was.
func (r *runner) runAll(ctx context.Context, kubelets []kubelet, runs int) (map[string]Runs, *Recheck, []string, error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil, errors.New("needs root: the suite's kubelet runs pods in containerd")
	}
	tools := []string{r.suite, r.agnhost}
	if r.focus.procs > 1 {
		tools = append(tools, r.ginkgo)
	}
	for _, f := range tools {
		if _, err := os.Stat(f); err != nil {
			return nil, nil, nil, fmt.Errorf("%w (make test-e2e-upstream builds it)", err)
		}
	}
	// Each run's directory and JUnit report are the report's evidence: none
	// from earlier runs.
	for _, d := range []string{filepath.Join(r.state, "runs"), r.junitDir} {
		if err := os.RemoveAll(d); err != nil {
			return nil, nil, nil, err
		}
	}
	var err error
	if r.selected, err = r.listSelected(ctx); err != nil {
		return nil, nil, nil, err
	}
	if r.only != nil {
		selected := map[string]bool{}
		for _, t := range r.selected {
			selected[t] = true
		}
		for _, t := range r.only {
			if !selected[t] {
				return nil, nil, nil, fmt.Errorf("-tests: %q is not a test of focus %q", t, r.focus.focus)
			}
		}
		r.selected = r.only
	}
	before, err := hoststate.CaptureNode(localnode.CgroupRoot, r.state)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("recording the host: %w", err)
	}
	cfg := localnode.Config{
		StateDir:    filepath.Join(r.state, "node"),
		BinDir:      r.bin,
		NodeName:    nodeName,
		RuntimeOnly: true,
		// The suite's kube-apiserver writes its serving certificate to its
		// default directory, /var/run/kubernetes (/var/run links to /run),
		// and the suite has no flag to move it.
		PrivateDirs: []string{"/run/kubernetes"},
	}
	// With systemd-run on PATH the suite would run its kubelet as a
	// transient systemd unit; systemd is not this machine's init.
	if p, err := exec.LookPath("systemd-run"); err == nil {
		cfg.HiddenCommands = append(cfg.HiddenCommands, p)
	}
	start := time.Now()
	res, rc, notes, runErr := r.onNode(ctx, cfg, kubelets, runs)
	downErr := localnode.Down(cfg)
	after, err := hoststate.CaptureNode(localnode.CgroupRoot, r.state)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("recording the host afterwards: %w", err)
	}
	if runErr != nil || downErr != nil {
		return nil, nil, nil, errors.Join(runErr, downErr)
	}
	if diff := hoststate.Diff(before, after); len(diff) > 0 {
		return nil, nil, nil, fmt.Errorf("the host changed during the run:\n  %s", strings.Join(diff, "\n  "))
	}
	notes = append(notes, fmt.Sprintf("%d run(s) per kubelet in %s; the host's sysctls, mounts, cgroups, network devices, iptables rules, the files under the paths a node touches and the entries of / were the same before and after.", runs, time.Since(start).Round(time.Second)))
	return res, rc, notes, nil
}

const nodeName = "critlet-e2e-node"

func (r *runner) onNode(ctx context.Context, cfg localnode.Config, kubelets []kubelet, runs int) (map[string]Runs, *Recheck, []string, error) {
	n, err := localnode.UpRuntime(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	imgs, err := suiteImages(imageSources{Pause: filepath.Join(r.bin, "pause"), Agnhost: r.agnhost, Busybox: "/bin/busybox"})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := n.ImportImages(ctx, imgs...); err != nil {
		return nil, nil, nil, err
	}
	notes := []string{fmt.Sprintf("%d tests selected.", len(r.selected))}
	for _, k := range kubelets {
		out, err := exec.CommandContext(ctx, k.binary, "--version").Output()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s --version: %w", k.binary, err)
		}
		notes = append(notes, fmt.Sprintf("%s: %s (%s)", k.name, k.binary, strings.TrimSpace(string(out))))
	}
	notes = append(notes,
		fmt.Sprintf("Images built here and imported: %s (the project's pause), %s (agnhost from the pinned module on Debian's busybox), %s (Debian's busybox). Any other image the suite names cannot be pulled: there is no registry.", pauseImage, agnhostImage, busyboxImage),
		"The suite: "+r.suite+", focus `"+r.focus.focus+"`, image pre-pulling off, the kubelets with default settings.",
	)
	focus := r.focus.focus
	if r.only != nil {
		focus = testsFocus(r.only)
	}
	res := map[string]Runs{}
	for i := 1; i <= runs; i++ {
		if err := r.runKubelets(ctx, n, kubelets, pass{label: strconv.Itoa(i), focus: focus, tests: r.selected}, res, notes); err != nil {
			return nil, nil, nil, err
		}
	}
	names := kubeletNames(kubelets)
	diffs := rechecked(compare(names, res))
	if r.focus.recheck == 0 || len(diffs) == 0 {
		return res, nil, notes, nil
	}
	again := map[string]Runs{}
	for i := 1; i <= r.focus.recheck; i++ {
		if err := r.runKubelets(ctx, n, kubelets, pass{label: fmt.Sprintf("recheck-%d", i), focus: testsFocus(diffs), tests: diffs}, again, nil); err != nil {
			return nil, nil, nil, err
		}
	}
	return res, recheck(compare(names, res), again), notes, nil
}

// runKubelets runs pass once on each kubelet, adding the results to res,
// and clears the node after each.
func (r *runner) runKubelets(ctx context.Context, n *localnode.Node, kubelets []kubelet, p pass, res map[string]Runs, notes []string) error {
	for _, k := range kubelets {
		started := time.Now()
		results, err := r.runSuite(ctx, n, k, p)
		if err != nil {
			return fmt.Errorf("%s run %s: %w", k.name, p.label, err)
		}
		fmt.Fprintf(os.Stderr, "e2e-upstream: %s run %s: %d tests in %s\n", k.name, p.label, len(p.tests), time.Since(started).Round(time.Second))
		res[k.name] = append(res[k.name], results)
		if r.progress != nil && notes != nil {
			r.progress(res, notes)
		}
		if err := n.ResetKubelet(ctx); err != nil {
			return fmt.Errorf("clearing the node after %s run %s: %w", k.name, p.label, err)
		}
	}
	return nil
}
