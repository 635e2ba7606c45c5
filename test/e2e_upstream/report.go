package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Runs holds, for one kubelet, each run's results in order.
type Runs []map[string]Result

// column summarises one test's results over a kubelet's runs: the outcome
// counts ("passed ×10", "passed ×9, failed ×1") and the distinct reasons.
type column struct {
	counts  map[Outcome]int
	reasons []string
}

func summarise(runs Runs, test string) column {
	c := column{counts: map[Outcome]int{}}
	seen := map[string]bool{}
	for _, run := range runs {
		r, ok := run[test]
		if !ok {
			c.counts["absent"]++
			continue
		}
		c.counts[r.Outcome]++
		if reason := firstLine(r.Reason); reason != "" && !seen[reason] {
			seen[reason] = true
			c.reasons = append(c.reasons, reason)
		}
	}
	return c
}

func (c column) String() string {
	var parts []string
	for _, o := range []Outcome{Passed, Failed, Skipped, "absent"} {
		if n := c.counts[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", o, n))
		}
	}
	return strings.Join(parts, ", ")
}

// flaky reports whether a test's runs on one kubelet did not all end alike.
func (c column) flaky() bool { return len(c.counts) > 1 }

// Comparison is the result of comparing the kubelets' runs.
type Comparison struct {
	Kubelets    []string
	Tests       []string // every test any run ran, sorted
	Columns     map[string][]column
	Differences []string // tests whose columns differ
	Flakes      map[string][]string
}

// compare lines the kubelets' runs up test by test.
func compare(kubelets []string, runs map[string]Runs) Comparison {
	cmp := Comparison{Kubelets: kubelets, Columns: map[string][]column{}, Flakes: map[string][]string{}}
	names := map[string]bool{}
	for _, k := range kubelets {
		for _, run := range runs[k] {
			for t := range run {
				names[t] = true
			}
		}
	}
	for t := range names {
		cmp.Tests = append(cmp.Tests, t)
	}
	sort.Strings(cmp.Tests)
	for _, t := range cmp.Tests {
		var cols []column
		for _, k := range kubelets {
			col := summarise(runs[k], t)
			cols = append(cols, col)
			if col.flaky() {
				cmp.Flakes[k] = append(cmp.Flakes[k], t)
			}
		}
		cmp.Columns[t] = cols
		for _, col := range cols[1:] {
			if col.String() != cols[0].String() {
				cmp.Differences = append(cmp.Differences, t)
				break
			}
		}
	}
	return cmp
}

// Recheck is a second look at the tests the kubelets differed on: each run
// again, alone, on every kubelet. A difference reproduces when the
// kubelets' recheck columns differ too; one that does not came from the
// machine (timing under load), not from a kubelet.
type Recheck struct {
	Runs          map[string]Runs
	Reproduced    []string
	NotReproduced []string
}

// recheck classifies cmp's differences by the recheck runs. Differences in
// the suite's set-up and tear-down nodes cannot be run alone: they stand.
func recheck(cmp Comparison, runs map[string]Runs) *Recheck {
	rc := &Recheck{Runs: runs}
	for _, t := range cmp.Differences {
		if !strings.HasPrefix(t, "[It] ") {
			rc.Reproduced = append(rc.Reproduced, t)
			continue
		}
		first := summarise(runs[cmp.Kubelets[0]], t).String()
		same := true
		for _, k := range cmp.Kubelets[1:] {
			if summarise(runs[k], t).String() != first {
				same = false
			}
		}
		if same {
			rc.NotReproduced = append(rc.NotReproduced, t)
		} else {
			rc.Reproduced = append(rc.Reproduced, t)
		}
	}
	return rc
}

// rechecked returns the tests to recheck: cmp's differences that are tests.
func rechecked(cmp Comparison) []string {
	var out []string
	for _, t := range cmp.Differences {
		if strings.HasPrefix(t, "[It] ") {
			out = append(out, t)
		}
	}
	return out
}

// machineFailures returns, for each test that passed in no run on any
// kubelet, the cause that explains it ("" for none), from its reasons.
func machineFailures(cmp Comparison, runs map[string]Runs) map[string]string {
	out := map[string]string{}
	for _, t := range cmp.Tests {
		if !strings.HasPrefix(t, "[It] ") {
			continue
		}
		var reasons []string
		passed := false
		for _, k := range cmp.Kubelets {
			for _, run := range runs[k] {
				if r, ok := run[t]; ok {
					passed = passed || r.Outcome == Passed
					reasons = append(reasons, r.Reason)
				}
			}
		}
		if !passed {
			out[t] = causeOf(t, strings.Join(reasons, "\n"))
		}
	}
	return out
}

// totals counts the tests' outcomes over all of a kubelet's runs; the
// suite's set-up and tear-down nodes are in the table, not in the totals.
func totals(runs Runs) map[Outcome]int {
	t := map[Outcome]int{}
	for _, run := range runs {
		for name, r := range run {
			if strings.HasPrefix(name, "[It] ") {
				t[r.Outcome]++
			}
		}
	}
	return t
}

// writeReport renders the comparison as Markdown; rc, when not nil, is the
// recheck of the differences.
func writeReport(w io.Writer, title string, cmp Comparison, runs map[string]Runs, rc *Recheck, notes []string) {
	fmt.Fprintf(w, "# %s\n\n", title)
	for _, n := range notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintf(w, "\n## Totals\n\n| kubelet | runs | passed | failed | skipped |\n|---|---|---|---|---|\n")
	for _, k := range cmp.Kubelets {
		t := totals(runs[k])
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", k, len(runs[k]), t[Passed], t[Failed], t[Skipped])
	}
	fmt.Fprintf(w, "\n## Differences between the kubelets\n\n")
	if len(cmp.Differences) == 0 {
		fmt.Fprintf(w, "None: every test ended alike on every kubelet.\n")
	}
	if rc != nil {
		fmt.Fprintf(w, "Each difference was run again, alone, %d time(s) on every kubelet: %d reproduced, %d did not (timing on this machine, not a kubelet).\n\n",
			len(rc.Runs[cmp.Kubelets[0]]), len(rc.Reproduced), len(rc.NotReproduced))
	}
	reproduced := map[string]bool{}
	if rc != nil {
		for _, t := range rc.Reproduced {
			reproduced[t] = true
		}
	}
	for _, t := range cmp.Differences {
		fmt.Fprintf(w, "- %s:", t)
		for i, k := range cmp.Kubelets {
			fmt.Fprintf(w, " %s %s;", k, cmp.Columns[t][i])
		}
		if rc != nil {
			fmt.Fprintf(w, " recheck:")
			for _, k := range cmp.Kubelets {
				col := summarise(rc.Runs[k], t)
				fmt.Fprintf(w, " %s %s", k, col)
				if len(col.reasons) > 0 {
					fmt.Fprintf(w, " (%s)", strings.Join(col.reasons, " / "))
				}
				fmt.Fprintf(w, ";")
			}
			if reproduced[t] {
				fmt.Fprintf(w, " **reproduced**")
			} else {
				fmt.Fprintf(w, " did not reproduce")
			}
		}
		fmt.Fprintln(w)
	}
	machine := machineFailures(cmp, runs)
	fmt.Fprintf(w, "\n## Failures and skips on every kubelet, by cause\n\n")
	byCause := map[string]int{}
	var unexplained []string
	for t, c := range machine {
		if c == "" {
			unexplained = append(unexplained, t)
		}
		byCause[c]++
	}
	if len(machine) == 0 {
		fmt.Fprintf(w, "None: every test passed on some kubelet.\n")
	}
	for _, c := range causes {
		if n := byCause[c.why]; n > 0 {
			fmt.Fprintf(w, "- %d: %s\n", n, c.why)
		}
	}
	sort.Strings(unexplained)
	if len(unexplained) > 0 {
		fmt.Fprintf(w, "- %d UNEXPLAINED: %s\n", len(unexplained), strings.Join(unexplained, "; "))
	}
	fmt.Fprintf(w, "\n## Flakes (a test whose runs on one kubelet did not all end alike)\n\n")
	for _, k := range cmp.Kubelets {
		fmt.Fprintf(w, "- %s: %d", k, len(cmp.Flakes[k]))
		if len(cmp.Flakes[k]) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(cmp.Flakes[k], "; "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n## Tests\n\n| test | %s | reason (failure or skip) | cause on this machine |\n|---|%s---|---|\n", strings.Join(cmp.Kubelets, " | "), strings.Repeat("---|", len(cmp.Kubelets)))
	for _, t := range cmp.Tests {
		cells := []string{cell(t)}
		var reasons []string
		seen := map[string]bool{}
		for _, col := range cmp.Columns[t] {
			cells = append(cells, col.String())
			for _, r := range col.reasons {
				if !seen[r] {
					seen[r] = true
					reasons = append(reasons, r)
				}
			}
		}
		cells = append(cells, cell(strings.Join(reasons, " / ")), cell(machine[t]))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// firstLine is the first non-empty line of s, cut to 300 characters.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			return l
		}
	}
	return ""
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
