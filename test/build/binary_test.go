//go:build buildcheck || releasecheck

package build

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/critlet/critlet/pkg/patched"
)

const (
	upstreamModule = patched.UpstreamModule
	// The project's own packages, which no upstream build contains.
	critletModule = "github.com/critlet/critlet"
	preemptionPkg = upstreamModule + "/pkg/kubelet/preemption"
)

// root is the repository's root.
var root = mustAbs("../..")

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

// reaches reports whether start, following direct calls among fns, calls
// target itself, and returns the path of calls that does.
func reaches(fns map[string]*fn, start, target string) (bool, string) {
	from := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		f := fns[name]
		if f == nil {
			continue
		}
		for _, c := range f.calls {
			if _, seen := from[c]; seen {
				continue
			}
			from[c] = name
			if c == target {
				path := []string{c}
				for n := name; n != ""; n = from[n] {
					path = append(path, n)
				}
				slices.Reverse(path)
				return true, strings.Join(path, " -> ")
			}
			queue = append(queue, c)
		}
	}
	return false, ""
}

// packageOf returns the import path of a function named as the linker
// names it: everything before the first dot after the last slash.
func packageOf(symbol string) string {
	slash := strings.LastIndex(symbol, "/")
	dot := strings.Index(symbol[slash+1:], ".")
	if dot < 0 {
		return symbol
	}
	return symbol[:slash+1+dot]
}

// checkHandler proves from the machine code of bin, not the source tree,
// that upstream's NewMainKubelet builds the handler of the preemption
// package, and that every patch patched.Patches declares is in the code the
// kubelet runs (wantCritlet: each declared Reach's From calls, through
// direct calls, exactly its To) or absent (a stock kubelet: no Reach holds
// and no critlet code is linked at all). It reads the binary without running
// it, so it serves every architecture.
func checkHandler(t *testing.T, name, bin string, wantCritlet bool) {
	t.Helper()
	const (
		newMainKubelet = upstreamModule + "/pkg/kubelet.NewMainKubelet"
		newHandler     = preemptionPkg + ".NewCriticalPodAdmissionHandler"
	)
	// The package's files as the linker recorded them: with -trimpath an
	// upstream package is <module>@<version>/<dir>, critlet's own <module>/<dir>.
	version, _ := upstreamVersion(t)
	preemptionDir := upstreamModule + "@" + version + "/pkg/kubelet/preemption/"
	// NewMainKubelet, and the functions of every package a declared proof
	// starts in and of critlet itself: every path of direct calls from a
	// From to its To lies within them.
	scopes := []string{regexp.QuoteMeta(newMainKubelet) + `$`, regexp.QuoteMeta(preemptionPkg) + `\.`, regexp.QuoteMeta(critletModule) + `/`}
	var proofs []patched.Reach
	for _, p := range patched.Patches {
		if len(p.Proof) == 0 {
			t.Errorf("patch %s declares no proof", p.Name)
		}
		for _, r := range p.Proof {
			proofs = append(proofs, r)
			scopes = append(scopes, regexp.QuoteMeta(packageOf(r.From))+`\.`)
		}
	}
	scope := `^(` + strings.Join(scopes, "|") + `)`

	syms := symbols(t, bin)
	var critletSyms []string
	for _, s := range syms {
		if strings.Contains(s, critletModule+"/") {
			critletSyms = append(critletSyms, s)
		}
	}
	if !slices.Contains(syms, newMainKubelet) {
		t.Fatalf("%s has no symbol %s", name, newMainKubelet)
	}
	fns := disassemble(t, bin, scope)
	files := sourceFiles(t, bin, fns)

	// NewMainKubelet -> NewCriticalPodAdmissionHandler, called or inlined.
	nmk := fns[newMainKubelet]
	if nmk == nil || len(nmk.pcs) == 0 {
		t.Fatalf("objdump found no code for %s", newMainKubelet)
	}
	switch {
	case slices.Contains(nmk.calls, newHandler):
		t.Logf("%s: %s calls %s", name, newMainKubelet, newHandler)
	case inlinedInto(t, bin, "k8s.io/kubernetes/pkg/kubelet", newMainKubelet, newHandler) &&
		inlines(nmk, files, preemptionDir):
		t.Logf("%s: %s inlines %s (DWARF), code from %s", name, newMainKubelet, newHandler, preemptionDir)
	default:
		t.Errorf("%s: %s neither calls nor inlines %s", name, newMainKubelet, newHandler)
	}

	for _, r := range proofs {
		if !slices.Contains(syms, r.From) {
			t.Errorf("%s has no symbol %s", name, r.From)
			continue
		}
		found, path := reaches(fns, r.From, r.To)
		switch {
		case wantCritlet && found:
			t.Logf("%s: %s", name, path)
		case wantCritlet:
			t.Errorf("%s: %s does not reach %s", name, r.From, r.To)
		case found:
			t.Errorf("%s: upstream's %s reaches critlet's %s: %s", name, r.From, r.To, path)
		}
	}
	if wantCritlet {
		t.Logf("%s: %d symbols of critlet's packages", name, len(critletSyms))
		return
	}
	if len(critletSyms) > 0 {
		t.Errorf("%s links critlet code: %v", name, critletSyms[:min(5, len(critletSyms))])
	}
}
