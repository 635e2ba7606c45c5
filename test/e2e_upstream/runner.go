package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/hoststate"
	"github.com/critlet/critlet/internal/localnode"
)

// kubelet is one kubelet under test: its name heads its column in the
// report and labels its runs' files.
type kubelet struct{ name, binary string }

// kubeletNames are the kubelets' names, in order: the report's columns.
func kubeletNames(kubelets []kubelet) []string {
	names := make([]string, len(kubelets))
	for i, k := range kubelets {
		names[i] = k.name
	}
	return names
}

// runner runs the suite on each kubelet, in turn, on one node.
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

// runAll brings up the node, runs the suite runs times on each kubelet,
// alternating, rechecks the differences, and takes the node down. The host
// must be as it was.
func (r *runner) runAll(ctx context.Context, kubelets []kubelet, runs int) (map[string]Runs, *Recheck, []string, error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil, errors.New("needs root: the suite's kubelet runs pods in containerd")
	}
	tools := []string{r.suite}
	if r.focus.agnhost {
		tools = append(tools, r.agnhost)
	}
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
	notes = append(notes, fmt.Sprintf("%d run(s) per kubelet in %s; the host's sysctls, iptables rules, the mounts, cgroups and network devices a node could make (hoststate.NodeScope), the files under the paths a node touches and the entries of / were the same before and after.", runs, time.Since(start).Round(time.Second)))
	return res, rc, notes, nil
}

const nodeName = "critlet-e2e-node"

func (r *runner) onNode(ctx context.Context, cfg localnode.Config, kubelets []kubelet, runs int) (map[string]Runs, *Recheck, []string, error) {
	n, err := localnode.UpRuntime(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	src := imageSources{Pause: filepath.Join(r.bin, "pause"), Busybox: "/bin/busybox"}
	if r.focus.agnhost {
		src.Agnhost = r.agnhost
	}
	imgs, err := suiteImages(src)
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
	built := []string{pauseImage + " (the project's pause)", busyboxImage + " (Debian's busybox)"}
	if r.focus.agnhost {
		built = append(built, agnhostImage+" (agnhost from the pinned module on Debian's busybox)")
	}
	notes = append(notes,
		fmt.Sprintf("Images built here and imported: %s. Any other image the suite names cannot be pulled: there is no registry.", strings.Join(built, ", ")),
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
