package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/critlet/critlet/internal/localnode"
)

// suiteKubeletFlags follow the suite's own kubelet flags, which they
// override. Without systemd the suite moves the kubelet to /kubelet, the
// host's other processes to /system and "the runtime" to /docker-daemon:
// the kubelet is left where it runs and the host's processes where they are.
var suiteKubeletFlags = []string{
	"--runtime-cgroups=", "--kubelet-cgroups=", "--system-cgroups=",
	"--node-ip=" + localnode.NodeIP,
}

// baseKubeletConfig is the configuration the suite starts from: the values
// of its own fallback, and what this node needs, each said why.
func baseKubeletConfig() ([]byte, error) {
	c := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// The suite's fallback configuration.
		VolumeStatsAggPeriod:             metav1.Duration{Duration: 10 * time.Second},
		SerializeImagePulls:              ptr.To(false),
		FileCheckFrequency:               metav1.Duration{Duration: 10 * time.Second},
		PodCIDR:                          "10.100.0.0/24",
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 30 * time.Second},
		EvictionHard:                     map[string]string{"memory.available": "250Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
		EvictionMinimumReclaim:           map[string]string{"nodefs.available": "5%", "nodefs.inodesFree": "5%"},
		// Pods under the node's own cgroup root, which teardown owns,
		// rather than the host's root; cgroupfs as containerd is set up.
		CgroupRoot:   localnode.CgroupRoot,
		CgroupDriver: "cgroupfs",
		// This host has cgroup v1 hierarchies and may have swap.
		FailCgroupV1: ptr.To(false),
		FailSwapOn:   ptr.To(false),
		// Imported images cannot be pulled again: never collect them.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		// The default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec,
		// would be made on the host; /var/lib/kubelet is the node's own.
		VolumePluginDir: "/var/lib/kubelet/volume-plugins",
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("rendering the base kubelet configuration: %w", err)
	}
	return b, nil
}

// pass is one run of the suite: its label in file names, the focus it
// hands ginkgo and the tests whose results it reports.
type pass struct {
	label string
	focus string
	tests []string
}

// testsFocus is a ginkgo focus selecting exactly the named tests (and
// perhaps a few whose text begins alike, whose results are dropped): the
// JUnit name is "[It] " + the spec's text + " [" + its labels + "]", and
// ginkgo matches the focus against the suite's description + " " + the
// spec's text.
func testsFocus(names []string) string {
	var alts []string
	for _, name := range names {
		text := strings.TrimPrefix(name, "[It] ")
		if i := strings.LastIndex(text, " ["); i > 0 && strings.HasSuffix(text, "]") {
			text = text[:i]
		}
		alts = append(alts, regexp.QuoteMeta(" "+text))
	}
	return "(" + strings.Join(alts, "|") + ")"
}

// runSuite runs the suite once on kubelet k and returns its results. The
// suite's own failures are results; an error means the run itself broke.
func (r *runner) runSuite(ctx context.Context, n *localnode.Node, k kubelet, p pass) (map[string]Result, error) {
	dir := filepath.Join(r.state, "runs", k.name+"-"+p.label)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	work, reports, bin := filepath.Join(dir, "work"), filepath.Join(dir, "report"), filepath.Join(dir, "bin")
	for _, d := range []string{work, reports, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The test binary has no flag for the kubelet's path (run_local's
	// --k8s-bin-dir belongs to the builder): it runs the "kubelet" beside
	// the path it was started as. Both are links in the run's directory.
	suite := filepath.Join(bin, "e2e_node.test")
	if err := os.Symlink(r.suite, suite); err != nil {
		return nil, err
	}
	if err := os.Symlink(k.binary, filepath.Join(bin, "kubelet")); err != nil {
		return nil, err
	}
	conf, err := baseKubeletConfig()
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "kubelet-base.yaml")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, err
	}
	junit := filepath.Join(r.junitDir, k.name+"-"+p.label+".xml")
	if err := os.MkdirAll(filepath.Dir(junit), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(junit)
	suiteArgs := []string{
		"--prepull-images=false",
		"--container-runtime-endpoint=" + n.Config().CRIEndpoint(),
		"--kubelet-config-file=" + confPath,
		"--kubelet-flags=" + strings.Join(suiteKubeletFlags, " "),
		"--node-name=" + nodeName,
	}
	ginkgoArgs := []string{"focus=" + p.focus, "no-color", "v", "timeout=" + r.focus.timeout.String(), "junit-report=" + junit}
	if r.focus.skip != "" {
		ginkgoArgs = append(ginkgoArgs, "skip="+r.focus.skip)
	}
	// One process runs the test binary alone, with ginkgo's flags
	// prefixed; several need ginkgo's own runner, as upstream's run_local
	// uses it, which starts the binary once per process.
	path, args := suite, suiteArgs
	if r.focus.procs > 1 {
		path, args = r.ginkgo, []string{"run", fmt.Sprintf("--procs=%d", r.focus.procs)}
		for _, a := range ginkgoArgs {
			args = append(args, "--"+a)
		}
		args = append(append(args, suite, "--"), suiteArgs...)
	} else {
		for _, a := range ginkgoArgs {
			args = append(args, "--ginkgo."+a)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.focus.timeout+10*time.Minute)
	defer cancel()
	cmd, err := n.Command(ctx, work, path, args...)
	if err != nil {
		return nil, err
	}
	// etcd's data and the suite's other temporary files go to the run's
	// directory (only the API server's signing key, removed as soon as it
	// is read, is written to /tmp by name).
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o777|os.ModeSticky); err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	logPath := filepath.Join(dir, "suite.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(os.Stderr, "e2e-upstream: %s run %s: the suite's log is %s\n", k.name, p.label, logPath)
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return nil, fmt.Errorf("running the suite: %w", runErr)
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("the suite did not end within %s (log %s)", r.focus.timeout+10*time.Minute, logPath)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("interrupted (log %s)", logPath)
	}
	all, err := readJUnit(junit)
	if err != nil {
		return nil, fmt.Errorf("%w (the suite exited: %v; log %s)", err, runErr, logPath)
	}
	// The suite's set-up and tear-down nodes, and the pass's tests. A test
	// of the pass the report leaves out did not run, which is a failure (a
	// failed suite setup skips every test).
	results := map[string]Result{}
	for t, res := range all {
		if !strings.HasPrefix(t, "[It] ") {
			results[t] = res
		}
	}
	for _, t := range p.tests {
		res, ok := all[t]
		if !ok {
			res = Result{Outcome: Failed, Reason: "did not run (see the suite's setup in " + logPath + ")"}
		}
		results[t] = res
	}
	return results, nil
}

// listSelected asks the suite, in a dry run, which tests the focus selects.
func (r *runner) listSelected(ctx context.Context) ([]string, error) {
	dir := filepath.Join(r.state, "dry-run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	junit := filepath.Join(dir, "junit.xml")
	args := []string{"--ginkgo.dry-run", "--ginkgo.no-color", "--ginkgo.focus=" + r.focus.focus, "--ginkgo.junit-report=" + junit}
	if r.focus.skip != "" {
		args = append(args, "--ginkgo.skip="+r.focus.skip)
	}
	cmd := exec.CommandContext(ctx, r.suite, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("listing the focus's tests: %w\n%s", err, out)
	}
	results, err := readJUnit(junit)
	if err != nil {
		return nil, err
	}
	var names []string
	for t := range results {
		if strings.HasPrefix(t, "[It]") {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the focus %q selects no test", r.focus.focus)
	}
	sort.Strings(names)
	return names, nil
}
