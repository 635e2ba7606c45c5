package main

import (
	"encoding/xml"
	"fmt"
	"os"
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
