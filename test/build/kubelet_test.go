//go:build buildcheck

package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/settings"
)

var (
	patchedBin = filepath.Join(root, "_output/bin/kubelet")
	stockBin   = filepath.Join(root, "_output/bin/kubelet-stock")
)

func binaries(t *testing.T) {
	t.Helper()
	for _, b := range []string{patchedBin, stockBin} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v: build it first with 'make kubelet kubelet-stock'", err)
		}
	}
}

func TestVersion(t *testing.T) {
	binaries(t)
	wantStr, want := upstreamVersion(t)
	head := strings.TrimSpace(mustRun(t, "git", "rev-parse", "HEAD"))

	out := strings.TrimSpace(mustRun(t, patchedBin, "--version"))
	t.Logf("kubelet --version: %s", out)
	s, ok := strings.CutPrefix(out, "Kubernetes ")
	if !ok {
		t.Fatalf("kubelet --version = %q, want 'Kubernetes <version>'", out)
	}
	v, err := utilversion.ParseSemantic(s)
	if err != nil {
		t.Fatalf("kubelet version %q is not semver: %v", s, err)
	}
	if !v.EqualTo(want) {
		t.Errorf("kubelet version %s does not compare equal to %s", v, want)
	}
	if v.PreRelease() != "" {
		t.Errorf("kubelet version %s has a pre-release part; it would sort before %s", v, want)
	}
	if meta := "critlet." + head[:12]; v.BuildMetadata() != meta {
		t.Errorf("kubelet version build metadata = %q, want %q", v.BuildMetadata(), meta)
	}

	raw := mustRun(t, patchedBin, "--version=raw")
	for field, re := range map[string]string{
		"GitCommit":    regexp.QuoteMeta(head),
		"GitTreeState": "clean|dirty",
		"Major":        fmt.Sprint(want.Major()),
		"Minor":        fmt.Sprint(want.Minor()),
		"BuildDate":    `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`,
	} {
		if !regexp.MustCompile(field + `:"(` + re + `)"`).MatchString(raw) {
			t.Errorf("kubelet --version=raw: want %s matching %s in %s", field, re, raw)
		}
	}
	if strings.Contains(raw, `BuildDate:"1970-01-01T00:00:00Z"`) {
		t.Errorf("kubelet --version=raw has the unstamped build date: %s", raw)
	}

	stock := strings.TrimSpace(mustRun(t, stockBin, "--version"))
	if stock != "Kubernetes "+wantStr {
		t.Errorf("kubelet-stock --version = %q, want %q", stock, "Kubernetes "+wantStr)
	}
}

var flagRE = regexp.MustCompile(`^\s+(?:-[A-Za-z0-9], )?--([A-Za-z0-9][-A-Za-z0-9_.]*)`)

// helpFlags returns the long flags that bin --help lists, each with its help
// entry: the flag's line and any indented continuation lines.
func helpFlags(t *testing.T, bin string) map[string]string {
	t.Helper()
	entries := map[string]string{}
	var cur string
	for line := range strings.Lines(mustRun(t, bin, "--help")) {
		line = strings.TrimRight(line, "\n")
		switch m := flagRE.FindStringSubmatch(line); {
		case m != nil:
			cur = m[1]
			if _, dup := entries[cur]; dup {
				t.Errorf("%s --help lists --%s twice", bin, cur)
			}
			entries[cur] = line
		case cur != "" && strings.HasPrefix(line, " ") && strings.TrimSpace(line) != "":
			entries[cur] += "\n" + line
		default:
			cur = ""
		}
	}
	return entries
}

func names(m map[string]string) []string {
	out := slices.Collect(maps.Keys(m))
	slices.Sort(out)
	return out
}

// TestHelpListsUpstreamFlags checks that the patched kubelet lists every
// upstream flag exactly as kubelet-stock does, and that the only flags it
// adds are critlet's own, as package options declares them.
func TestHelpListsUpstreamFlags(t *testing.T) {
	binaries(t)
	got, want := helpFlags(t, patchedBin), helpFlags(t, stockBin)
	t.Logf("kubelet --help lists %d flags, kubelet-stock --help %d", len(got), len(want))
	for _, f := range []string{"config", "kubeconfig", "container-runtime-endpoint", "node-ip", "version", "help"} {
		if _, ok := want[f]; !ok {
			t.Errorf("could not find --%s in kubelet-stock --help; the flag parser is off", f)
		}
	}

	defaults := settings.Defaults()
	ours := map[string]bool{}
	settings.FlagSet(&defaults).VisitAll(func(f *pflag.Flag) { ours[f.Name] = true })

	for _, f := range names(want) {
		switch g, ok := got[f]; {
		case ours[f]:
			t.Errorf("critlet's flag --%s is also an upstream flag", f)
		case !ok:
			t.Errorf("kubelet --help lacks upstream's --%s", f)
		case g != want[f]:
			t.Errorf("kubelet --help changes upstream's --%s:\n got %s\nwant %s", f, g, want[f])
		}
	}
	var added []string
	for _, f := range names(got) {
		if _, upstream := want[f]; upstream {
			continue
		}
		added = append(added, f)
		if !ours[f] {
			t.Errorf("kubelet --help lists --%s, which is neither upstream's nor critlet's", f)
		}
	}
	for f := range ours {
		if _, ok := got[f]; !ok {
			t.Errorf("kubelet --help does not list critlet's --%s", f)
		}
	}
	t.Logf("upstream's %d flags listed unchanged; critlet adds %v", len(want), added)
}

// TestRebuildLeavesAnUnchangedKubelet: make test asks for the kubelets
// again while suites read them; a rebuild that changes nothing leaves the
// file, and its time (the packages' version reads it), as they were.
func TestRebuildLeavesAnUnchangedKubelet(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubelet-stock")
	mustRun(t, "hack/build-kubelet.sh", "stock", bin)
	before, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "hack/build-kubelet.sh", "stock", bin)
	after, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the rebuild replaced %s (modified %s, was %s)", bin, after.ModTime(), before.ModTime())
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(bin), ".*")); len(matches) > 0 {
		t.Errorf("the builds left %v", matches)
	}
}

// TestPlainBuildRefusesToRun builds ./cmd/kubelet the way a user might by
// mistake, without the overlay, and checks the result refuses to start.
func TestPlainBuildRefusesToRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubelet-plain")
	mustRun(t, "go", "build", "-trimpath", "-o", bin, "./cmd/kubelet")
	for _, args := range [][]string{{"--version"}, {"--help"}, {}} {
		out, errOut, code := run(t, bin, args...)
		if code == 0 {
			t.Errorf("unpatched kubelet %v exited 0:\n%s%s", args, out, errOut)
		}
		if !strings.Contains(errOut, "make kubelet") {
			t.Errorf("unpatched kubelet %v: stderr does not point to 'make kubelet':\n%s", args, errOut)
		}
		if strings.Contains(out, "Kubernetes v") {
			t.Errorf("unpatched kubelet %v printed a version: %s", args, out)
		}
	}
}

// TestBuildWithoutAHookRefusesToRun builds the kubelet with the build's own
// overlay less one hooked file, as a stale or hand-edited overlay would, and
// checks the binary refuses to start, naming the patch whose hooks are
// missing.
func TestBuildWithoutAHookRefusesToRun(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "_output/build/overlay.json"))
	if err != nil {
		t.Fatalf("%v: build the kubelet first with 'make kubelet'", err)
	}
	var ov struct{ Replace map[string]string }
	if err := json.Unmarshal(data, &ov); err != nil {
		t.Fatal(err)
	}
	for _, p := range patched.Patches {
		if len(p.Hooks) == 0 {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			var hooked string
			for k := range ov.Replace {
				if strings.HasSuffix(k, "/"+p.Hooks[0].File) {
					hooked = k
				}
			}
			if hooked == "" {
				t.Fatalf("the overlay has no entry for %s", p.Hooks[0].File)
			}
			mutant := map[string]map[string]string{"Replace": maps.Clone(ov.Replace)}
			delete(mutant["Replace"], hooked)
			dir := t.TempDir()
			overlay := filepath.Join(dir, "overlay.json")
			b, _ := json.Marshal(mutant)
			if err := os.WriteFile(overlay, b, 0o644); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "kubelet")
			mustRun(t, "go", "build", "-modfile="+filepath.Join(root, "_output/build/go.mod"), "-trimpath", "-buildvcs=false",
				"-overlay="+overlay, "-tags="+patched.BuildTag, "-o", bin, "./cmd/kubelet")
			_, errOut, code := run(t, bin, "--version")
			if code != 3 || !strings.Contains(errOut, p.Name+" has hooks") || !strings.Contains(errOut, "make kubelet") {
				t.Fatalf("kubelet without %s's hook in %s: exit %d, stderr %q; want exit 3 naming the patch", p.Name, p.Hooks[0].File, code, errOut)
			}
		})
	}
}

// TestBinaryRunsCritletHandler proves from the machine code, not the source
// tree, that upstream's NewMainKubelet builds the handler of the preemption
// package and that this package is critlet's: its HandleAdmissionFailure
// reaches critlet's victims package, which upstream does not have.
func TestBinaryRunsCritletHandler(t *testing.T) {
	binaries(t)
	t.Run("kubelet", func(t *testing.T) { checkHandler(t, "kubelet", patchedBin, true) })
	t.Run("kubelet-stock", func(t *testing.T) { checkHandler(t, "kubelet-stock", stockBin, false) })
}

func TestSize(t *testing.T) {
	binaries(t)
	p, err := os.Stat(patchedBin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.Stat(stockBin)
	if err != nil {
		t.Fatal(err)
	}
	growth := float64(p.Size()-s.Size()) / float64(s.Size()) * 100
	t.Logf("kubelet %d bytes, kubelet-stock %d bytes (%+.3f%%)", p.Size(), s.Size(), growth)
	if float64(p.Size()) > float64(s.Size())*1.02 {
		t.Errorf("kubelet is %.2f%% larger than kubelet-stock; the limit is 2%%", growth)
	}
}

// TestCritletFlagsOnTheBuiltBinary checks critlet's settings on the shipped
// binary: bad values stop it before anything starts, with a message naming
// the flag; good ones pass through to upstream's kubelet, which then runs.
func TestCritletFlagsOnTheBuiltBinary(t *testing.T) {
	binaries(t)
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"--critical-preemption-policy=largest-first", "--version"}, 2, "--critical-preemption-policy"},
		{[]string{"--critical-preemption-parallelism=0", "--version"}, 2, "want 1 to 256"},
		{[]string{"--critical-preemption-kill-timeout", "soon", "--version"}, 2, "critical-preemption-kill-timeout"},
		{[]string{"--critical-preemption-policy=priority", "--critical-preemption-parallelism", "4", "--version"}, 0, "Kubernetes v"},
		{[]string{"--critical-static-pod-readmission=sometimes", "--version"}, 2, "sometimes"},
		{[]string{"--critical-static-pod-readmision", "--version"}, 2, "critical-static-pod-readmision"},
		{[]string{"--critical-static-pod-readmission", "--version"}, 0, "Kubernetes v"},
		{[]string{"--critical-preemption-resume=maybe", "--version"}, 2, "maybe"},
		{[]string{"--critical-preemption-resume", "--critical-preemption-outage-recovery", "--version"}, 0, "Kubernetes v"},
		{[]string{"--critical-preemption-outage-recover", "--version"}, 2, "critical-preemption-outage-recover"},
	} {
		stdout, stderr, code := run(t, patchedBin, tc.args...)
		if code != tc.wantCode || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("kubelet %v: exit %d, output %q; want exit %d mentioning %q", tc.args, code, stdout+stderr, tc.wantCode, tc.want)
		}
	}
	cmd := exec.Command(patchedBin, "--version")
	cmd.Env = append(os.Environ(), "CRITLET_PREEMPTION_POLICY=unknown")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "CRITLET_PREEMPTION_POLICY") {
		t.Errorf("a bad CRITLET_PREEMPTION_POLICY gave %v, %q; want exit 2 naming the variable", err, out)
	}
}
