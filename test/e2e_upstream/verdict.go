package main

import (
	"fmt"
	"sort"
)

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
