package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/reporters"
)

// Outcome is what became of one test in one run.
type Outcome string

const (
	Passed  Outcome = "passed"
	Failed  Outcome = "failed"
	Skipped Outcome = "skipped"
)

// Result is one test's outcome in one run, with the suite's reason for a
// failure or a skip.
type Result struct {
	Outcome  Outcome
	Reason   string
	Duration time.Duration
}

// readJUnit reads ginkgo's JUnit report: test name → result. Tests the
// focus did not select (skipped without a reason) are left out.
func readJUnit(path string) (map[string]Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the suite's JUnit report: %w", err)
	}
	var suites reporters.JUnitTestSuites
	if err := xml.Unmarshal(b, &suites); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	results := map[string]Result{}
	for _, s := range suites.TestSuites {
		for _, tc := range s.TestCases {
			r := Result{Duration: time.Duration(tc.Time * float64(time.Second))}
			switch {
			case tc.Skipped != nil && (tc.Skipped.Message == "skipped" || tc.Skipped.Message == "pending"):
				continue // not selected
			case tc.Skipped != nil:
				r.Outcome, r.Reason = Skipped, strings.TrimPrefix(tc.Skipped.Message, "skipped - ")
			case tc.Failure != nil:
				r.Outcome, r.Reason = Failed, tc.Status+": "+tc.Failure.Message
			case tc.Error != nil:
				r.Outcome, r.Reason = Failed, tc.Status+": "+tc.Error.Message
			case tc.Status == "passed":
				r.Outcome = Passed
			default:
				r.Outcome, r.Reason = Failed, "state "+tc.Status
			}
			results[tc.Name] = r
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("%s holds no test that ran: the focus selected nothing", path)
	}
	return results, nil
}

// loadJUnits reads the JUnit reports runs and rechecks left in dir, as
// runSuite names them (<kubelet>-<label>.xml), instead of running the suite.
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
