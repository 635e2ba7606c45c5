//go:build buildcheck

package build

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
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

	"github.com/critlet/critlet/pkg/kubelet/preemption/options"
	"github.com/critlet/critlet/pkg/patched"
)

const (
	upstreamModule = patched.UpstreamModule
	// The project's own packages, which no upstream build contains.
	critletModule = "github.com/critlet/critlet"
	victimsPkg    = critletModule + "/pkg/kubelet/preemption/victims"
	preemptionPkg = upstreamModule + "/pkg/kubelet/preemption"
)

var (
	root       = mustAbs("../..")
	patchedBin = filepath.Join(root, "_output/bin/kubelet")
	stockBin   = filepath.Join(root, "_output/bin/kubelet-stock")
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

// run executes name in the repository root and returns stdout, stderr and
// the exit code; failing to start at all fails the test.
func run(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("running %s %v: %v", name, args, err)
	return "", "", 0
}

// mustRun is run for commands that must succeed.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, errOut)
	}
	return out
}

func binaries(t *testing.T) {
	t.Helper()
	for _, b := range []string{patchedBin, stockBin} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v: build it first with 'make kubelet kubelet-stock'", err)
		}
	}
}

// upstreamVersion is the k8s.io/kubernetes version go.mod pins, as written
// there and parsed.
func upstreamVersion(t *testing.T) (string, *utilversion.Version) {
	t.Helper()
	s := strings.TrimSpace(mustRun(t, "go", "list", "-m", "-f", "{{.Version}}", upstreamModule))
	v, err := utilversion.ParseSemantic(s)
	if err != nil {
		t.Fatalf("go.mod pins %s at %q: %v", upstreamModule, s, err)
	}
	return s, v
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

	defaults := options.Defaults()
	ours := map[string]bool{}
	options.FlagSet(&defaults).VisitAll(func(f *pflag.Flag) { ours[f.Name] = true })

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

// symbols returns the text symbol names in bin (go tool nm).
func symbols(t *testing.T, bin string) []string {
	t.Helper()
	var names []string
	for line := range strings.Lines(mustRun(t, "go", "tool", "nm", bin)) {
		// addr type name, where the name may contain spaces.
		f := strings.SplitN(strings.TrimSpace(line), " ", 3)
		if len(f) == 3 && (f[1] == "T" || f[1] == "t") {
			names = append(names, f[2])
		}
	}
	if len(names) == 0 {
		t.Fatalf("go tool nm %s: no text symbols", bin)
	}
	return names
}

// fn is one function as go tool objdump prints it.
type fn struct {
	name  string
	pcs   []string // instruction addresses, hex with 0x
	calls []string // direct call targets
}

var (
	textRE = regexp.MustCompile(`^TEXT (.+)\(SB\) `)
	instRE = regexp.MustCompile(`^\s+\S+:\d+\s+(0x[0-9a-f]+)\s+[0-9a-f]+\s+(.*)$`)
	callRE = regexp.MustCompile(`\bCALL (.+)\(SB\)`)
)

// disassemble returns the functions of bin whose names match symbolRE.
func disassemble(t *testing.T, bin, symbolRE string) map[string]*fn {
	t.Helper()
	out := mustRun(t, "go", "tool", "objdump", "-s", symbolRE, bin)
	fns := map[string]*fn{}
	var cur *fn
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if m := textRE.FindStringSubmatch(line); m != nil {
			cur = &fn{name: m[1]}
			fns[cur.name] = cur
			continue
		}
		if m := instRE.FindStringSubmatch(line); m != nil && cur != nil {
			cur.pcs = append(cur.pcs, m[1])
			if c := callRE.FindStringSubmatch(m[2]); c != nil {
				cur.calls = append(cur.calls, c[1])
			}
		}
	}
	return fns
}

// sourceFiles maps every instruction address of fns to the source file its
// code comes from (go tool addr2line): for inlined code, the inlined
// function's file. With -trimpath an upstream file is recorded as
// <module>@<version>/<dir>/<file>, one of critlet's as <module>/<dir>/<file>.
func sourceFiles(t *testing.T, bin string, fns map[string]*fn) map[string]string {
	t.Helper()
	var pcs []string
	for _, f := range fns {
		pcs = append(pcs, f.pcs...)
	}
	cmd := exec.Command("go", "tool", "addr2line", bin)
	cmd.Stdin = strings.NewReader(strings.Join(pcs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool addr2line: %v", err)
	}
	// Two lines per address: function name, then file:line.
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 2*len(pcs) {
		t.Fatalf("go tool addr2line: %d lines for %d addresses", len(lines), len(pcs))
	}
	files := make(map[string]string, len(pcs))
	for i, pc := range pcs {
		file, _, _ := strings.Cut(lines[2*i+1], ":")
		files[pc] = file
	}
	return files
}

// inlinedInto reports whether the DWARF of bin records callee as inlined into
// caller, a function of package pkg.
func inlinedInto(t *testing.T, bin, pkg, caller, callee string) bool {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("opening %s: %v", bin, err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Fatalf("reading DWARF of %s: %v", bin, err)
	}
	r := d.Reader()
	// nameAt resolves an abstract-origin reference, which may point into
	// another compile unit.
	nameAt := func(off dwarf.Offset) string {
		r2 := d.Reader()
		r2.Seek(off)
		e, err := r2.Next()
		if err != nil || e == nil {
			return ""
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		return name
	}
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("reading DWARF of %s: %v", bin, err)
		}
		if e == nil {
			return false
		}
		if e.Tag == dwarf.TagCompileUnit {
			if name, _ := e.Val(dwarf.AttrName).(string); name != pkg {
				r.SkipChildren()
			}
			continue
		}
		if e.Tag != dwarf.TagSubprogram || !e.Children {
			continue
		}
		if name, _ := e.Val(dwarf.AttrName).(string); name != caller {
			r.SkipChildren()
			continue
		}
		// Walk the caller's body, nested inlines included.
		for depth := 1; depth > 0; {
			c, err := r.Next()
			if err != nil || c == nil {
				t.Fatalf("reading DWARF of %s inside %s: %v", bin, caller, err)
			}
			if c.Tag == 0 {
				depth--
				continue
			}
			if c.Tag == dwarf.TagInlinedSubroutine {
				if off, ok := c.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok && nameAt(off) == callee {
					return true
				}
			}
			if c.Children {
				depth++
			}
		}
	}
}

// inlines reports whether f runs code whose source file lies in dir.
func inlines(f *fn, files map[string]string, dir string) bool {
	for _, pc := range f.pcs {
		if strings.HasPrefix(files[pc], dir) {
			return true
		}
	}
	return false
}

// reaches reports whether start, following direct calls among fns, calls a
// function whose name starts with prefix or runs code inlined from dir, and
// returns the step that does.
func reaches(fns map[string]*fn, files map[string]string, start, prefix, dir string) (bool, string) {
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		f := fns[name]
		if f == nil {
			continue
		}
		for _, c := range f.calls {
			if strings.HasPrefix(c, prefix) {
				return true, name + " calls " + c
			}
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
		if inlines(f, files, dir) {
			return true, name + " inlines code from " + dir
		}
	}
	return false, ""
}

// TestBinaryRunsCritletHandler proves from the machine code, not the source
// tree, that upstream's NewMainKubelet builds the handler of the preemption
// package and that this package is critlet's: its HandleAdmissionFailure
// reaches critlet's victims package, which upstream does not have.
func TestBinaryRunsCritletHandler(t *testing.T) {
	binaries(t)
	const (
		newMainKubelet = upstreamModule + "/pkg/kubelet.NewMainKubelet"
		newHandler     = preemptionPkg + ".NewCriticalPodAdmissionHandler"
		handleFailure  = preemptionPkg + ".(*CriticalPodAdmissionHandler).HandleAdmissionFailure"
	)
	// The package's files as the linker recorded them: with -trimpath an
	// upstream package is <module>@<version>/<dir>, critlet's own <module>/<dir>.
	version, _ := upstreamVersion(t)
	preemptionDir := upstreamModule + "@" + version + "/pkg/kubelet/preemption/"
	victimsDir := victimsPkg + "/"
	// Functions of the preemption package and of critlet itself, plus
	// NewMainKubelet; every call path from the handler to victims that does not
	// pass through an indirect call lies within them.
	scope := `^(` + regexp.QuoteMeta(newMainKubelet) + `$|` + regexp.QuoteMeta(preemptionPkg) + `\.|` + regexp.QuoteMeta(critletModule) + `/)`

	for _, tc := range []struct {
		name    string
		bin     string
		patched bool
	}{
		{"kubelet", patchedBin, true},
		{"kubelet-stock", stockBin, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			syms := symbols(t, tc.bin)
			var critletSyms []string
			for _, s := range syms {
				if strings.Contains(s, critletModule+"/") {
					critletSyms = append(critletSyms, s)
				}
			}
			for _, s := range []string{newMainKubelet, handleFailure} {
				if !slices.Contains(syms, s) {
					t.Fatalf("%s has no symbol %s", tc.name, s)
				}
			}
			fns := disassemble(t, tc.bin, scope)
			files := sourceFiles(t, tc.bin, fns)

			// NewMainKubelet -> NewCriticalPodAdmissionHandler, called or inlined.
			nmk := fns[newMainKubelet]
			if nmk == nil || len(nmk.pcs) == 0 {
				t.Fatalf("objdump found no code for %s", newMainKubelet)
			}
			switch {
			case slices.Contains(nmk.calls, newHandler):
				t.Logf("%s: %s calls %s", tc.name, newMainKubelet, newHandler)
			case inlinedInto(t, tc.bin, "k8s.io/kubernetes/pkg/kubelet", newMainKubelet, newHandler) &&
				inlines(nmk, files, preemptionDir):
				t.Logf("%s: %s inlines %s (DWARF), code from %s", tc.name, newMainKubelet, newHandler, preemptionDir)
			default:
				t.Errorf("%s: %s neither calls nor inlines %s", tc.name, newMainKubelet, newHandler)
			}

			found, step := reaches(fns, files, handleFailure, victimsPkg+".", victimsDir)
			if tc.patched {
				if !found {
					t.Errorf("%s: %s does not reach %s", tc.name, handleFailure, victimsPkg)
				} else {
					t.Logf("%s: %s reaches victims: %s", tc.name, handleFailure, step)
				}
				var victims int
				for _, s := range critletSyms {
					if strings.HasPrefix(s, victimsPkg+".") {
						victims++
					}
				}
				if victims == 0 {
					t.Errorf("%s has no symbols of %s", tc.name, victimsPkg)
				}
				t.Logf("%s: %d symbols of critlet's packages, %d of them in victims", tc.name, len(critletSyms), victims)
				return
			}
			if found {
				t.Errorf("%s: upstream's handler reaches %s: %s", tc.name, victimsPkg, step)
			}
			if len(critletSyms) > 0 {
				t.Errorf("%s links critlet code: %v", tc.name, critletSyms[:min(5, len(critletSyms))])
			}
		})
	}
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
