package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"
)

// junitFrom writes a JUnit report with ginkgo's own writer, as the suite
// does, for specs in the given states.
func junitFrom(t *testing.T, specs map[string]types.SpecState, messages map[string]string) string {
	t.Helper()
	report := types.Report{SuiteDescription: "E2eNode Suite"}
	for text, state := range specs {
		report.SpecReports = append(report.SpecReports, types.SpecReport{
			LeafNodeType: types.NodeTypeIt, LeafNodeText: text, State: state,
			Failure: types.Failure{Message: messages[text]},
		})
	}
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := reporters.GenerateJUnitReportWithConfig(report, path, reporters.JunitReportConfig{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadJUnit(t *testing.T) {
	path := junitFrom(t, map[string]types.SpecState{
		"passes":      types.SpecStatePassed,
		"fails":       types.SpecStateFailed,
		"times out":   types.SpecStateTimedout,
		"panics":      types.SpecStatePanicked,
		"skips":       types.SpecStateSkipped,
		"unselected":  types.SpecStateSkipped,
		"not written": types.SpecStatePending,
	}, map[string]string{
		"fails":     "Expected Running\nwith status…",
		"times out": "timed out waiting",
		"skips":     "Skipping because systemd is not running",
	})
	got, err := readJUnit(path)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]Outcome{}
	for name, r := range got {
		outcomes[strings.TrimPrefix(name, "[It] ")] = r.Outcome
	}
	want := map[string]Outcome{"passes": Passed, "fails": Failed, "times out": Failed, "panics": Failed, "skips": Skipped}
	if !reflect.DeepEqual(outcomes, want) {
		t.Fatalf("outcomes = %v, want %v (a test the focus left out, skipped without a reason, or pending, is not a result)", outcomes, want)
	}
	if r := got["[It] skips"]; r.Reason != "Skipping because systemd is not running" {
		t.Errorf("skip reason = %q", r.Reason)
	}
	if r := got["[It] fails"]; !strings.Contains(r.Reason, "Expected Running") {
		t.Errorf("failure reason = %q", r.Reason)
	}

	if _, err := readJUnit(junitFrom(t, map[string]types.SpecState{"unselected": types.SpecStateSkipped}, nil)); err == nil {
		t.Error("a report in which nothing ran was accepted")
	}
	if _, err := readJUnit(filepath.Join(t.TempDir(), "absent.xml")); err == nil {
		t.Error("a missing report was accepted")
	}
}

func TestCompare(t *testing.T) {
	pass, fail := Result{Outcome: Passed}, Result{Outcome: Failed, Reason: "boom\nstack"}
	skip := Result{Outcome: Skipped, Reason: "no registry"}
	runs := map[string]Runs{
		"stock":   {{"[It] a": pass, "[It] b": skip, "[It] c": pass, "[SynchronizedBeforeSuite]": pass}, {"[It] a": pass, "[It] b": skip, "[It] c": pass}},
		"critlet": {{"[It] a": pass, "[It] b": skip, "[It] c": fail}, {"[It] a": pass, "[It] b": skip, "[It] c": pass}},
	}
	cmp := compare([]string{"stock", "critlet"}, runs)
	if !reflect.DeepEqual(cmp.Differences, []string{"[It] c", "[SynchronizedBeforeSuite]"}) {
		t.Fatalf("differences = %v, want c and the set-up node only stock reported", cmp.Differences)
	}
	if !reflect.DeepEqual(cmp.Flakes["stock"], []string{"[SynchronizedBeforeSuite]"}) || !reflect.DeepEqual(cmp.Flakes["critlet"], []string{"[It] c"}) {
		t.Fatalf("flakes = %v, want c on critlet, and on stock the node absent from one run", cmp.Flakes)
	}
	if got := cmp.Columns["[It] c"][1].String(); got != "passed ×1, failed ×1" {
		t.Errorf("critlet's column for c = %q", got)
	}
	if got := cmp.Columns["[It] c"][1].reasons; !reflect.DeepEqual(got, []string{"boom"}) {
		t.Errorf("reasons = %q, want the failure's first line", got)
	}

	var b strings.Builder
	writeReport(&b, "title", cmp, runs, nil, []string{"a note"})
	for _, want := range []string{"| stock | 2 | 4 | 0 | 2 |", "| critlet | 2 | 3 | 1 | 2 |", "- [It] c: stock passed ×2; critlet passed ×1, failed ×1;", "- critlet: 1 ([It] c)", "| [It] b | skipped ×2 | skipped ×2 | no registry |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}

	same := compare([]string{"stock", "critlet"}, map[string]Runs{"stock": {{"a": pass, "b": skip}}, "critlet": {{"a": pass, "b": skip}}})
	if len(same.Differences) != 0 {
		t.Errorf("identical runs differ: %v", same.Differences)
	}
	// Agreement is enough for the conformance set; the critical set must pass.
	res := map[string]Runs{"stock": {{"a": pass, "b": skip}}, "critlet": {{"a": pass, "b": skip}}}
	if p := verdict(focusSets["conformance"], same, res, nil); len(p) != 0 {
		t.Errorf("conformance verdict on agreeing kubelets: %v", p)
	}
	if p := verdict(focusSets["critical"], same, res, nil); len(p) != 2 {
		t.Errorf("critical verdict with a skip on each kubelet: %v, want both reported", p)
	}
	// Runs that ran nothing agree on nothing: a failure for either set.
	empty := map[string]Runs{"stock": {{}}, "critlet": {}}
	nothing := compare([]string{"stock", "critlet"}, empty)
	for _, f := range []string{"conformance", "critical"} {
		if p := verdict(focusSets[f], nothing, empty, nil); !reflect.DeepEqual(p, []string{"stock run 1: no test ran", "critlet: no run"}) {
			t.Errorf("%s verdict on runs of no test: %v", f, p)
		}
	}
}

// A difference that the recheck runs do not show again is reported, and
// does not fail the run; one they show again does.
func TestRecheck(t *testing.T) {
	pass, fail := Result{Outcome: Passed}, Result{Outcome: Failed, Reason: "timed out"}
	kubelets := []string{"stock", "critlet"}
	runs := map[string]Runs{
		"stock":   {{"[It] slow": pass, "[It] broken": pass, "[It] same": pass}},
		"critlet": {{"[It] slow": fail, "[It] broken": fail, "[It] same": pass}},
	}
	cmp := compare(kubelets, runs)
	if got := rechecked(cmp); !reflect.DeepEqual(got, []string{"[It] broken", "[It] slow"}) {
		t.Fatalf("rechecked %v", got)
	}
	again := map[string]Runs{
		"stock":   {{"[It] slow": pass, "[It] broken": pass}, {"[It] slow": pass, "[It] broken": pass}},
		"critlet": {{"[It] slow": pass, "[It] broken": fail}, {"[It] slow": pass, "[It] broken": fail}},
	}
	rc := recheck(cmp, again)
	if !reflect.DeepEqual(rc.Reproduced, []string{"[It] broken"}) || !reflect.DeepEqual(rc.NotReproduced, []string{"[It] slow"}) {
		t.Fatalf("reproduced %v, not %v", rc.Reproduced, rc.NotReproduced)
	}
	if p := verdict(focusSets["conformance"], cmp, runs, rc); !reflect.DeepEqual(p, []string{"kubelets differ on [It] broken"}) {
		t.Errorf("verdict %v, want the reproduced difference only", p)
	}
	var b strings.Builder
	writeReport(&b, "title", cmp, runs, rc, nil)
	for _, want := range []string{"1 reproduced, 1 did not", "recheck: stock passed ×2; critlet failed ×2 (timed out); **reproduced**", "recheck: stock passed ×2; critlet passed ×2; did not reproduce"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// The focus for named tests matches their spec text without the labels
// JUnit appends, quoted.
func TestTestsFocus(t *testing.T) {
	got := testsFocus([]string{"[It] [sig-node] Pods should (x) [NodeConformance] [sig-node, NodeConformance]", "[It] plain"})
	want := `( \[sig-node\] Pods should \(x\) \[NodeConformance\]| plain)`
	if got != want {
		t.Errorf("testsFocus = %s, want %s", got, want)
	}
}

func TestAppletLink(t *testing.T) {
	for p, want := range map[string]string{"/bin/sh": "../bin/busybox", "/usr/sbin/chroot": "../../bin/busybox", "/linuxrc": "bin/busybox"} {
		if got := appletLink(p); got != want {
			t.Errorf("appletLink(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestParseKubelets(t *testing.T) {
	dir := t.TempDir()
	if _, err := parseKubelets("stock=" + filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing binary was accepted")
	}
	for _, bad := range []string{"stock", "=x", "a=/bin/true,a=/bin/true"} {
		if _, err := parseKubelets(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	got, err := parseKubelets("stock=/bin/true,critlet=/bin/false")
	if err != nil || len(got) != 2 || got[1].name != "critlet" {
		t.Fatalf("parseKubelets = %v, %v", got, err)
	}
}
