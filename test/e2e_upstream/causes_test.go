package main

import (
	"strings"
	"testing"
)

// Failures as this machine's conformance run reported them find their
// cause; a failure nothing explains finds none, and fails the run.
func TestCauses(t *testing.T) {
	for _, tc := range []struct{ test, reason, want string }{
		{"[It] [sig-node] Containers Lifecycle when initializing an init container after a restartable init container Should begin initializing the pod, restartPolicy=Never",
			`failed: Failed to parse the timestamp, log: "/bin/sh: nmeter: not found": parsing time`, "nmeter"},
		{"[It] [sig-node] Containers Lifecycle when running restartable init containers with startup probes should launch restartable init containers serially",
			`failed: Failed to parse the timestamp, log: "2026-12-03TZ restartable-init-1 Starting 10": parsing time "2026-12-03TZ"`, "nmeter"},
		{"[It] [sig-node] Hostname of Pod a pod without subdomain field does not have FQDN",
			`failed: expected pod "hostfqdn-111242" success: Timed out … message: 'Back-off pulling image "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1":`, "there is none here"},
		{"[It] [sig-node] MirrorPod when create a mirror pod should be updated when static pod updated [NodeConformance]",
			`failed: Timed out after 120.001s. expected the mirror pod to be running, got "Pending"`, "nginx"},
		{"[It] [sig-node] PrivilegedPod should enable privileged commands [LinuxOnly]",
			`failed: cmd [ip link add dummy1 type dummy], stdout "", stderr "ip: RTNETLINK answers: Operation not supported"`, "dummy"},
		{"[It] [sig-node] Pods should be submitted and removed", "failed: Timed out after 300s", ""},
	} {
		got := causeOf(tc.test, tc.reason)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("cause of %q: %q, want one naming %q", tc.test, got, tc.want)
		}
	}

	fail := Result{Outcome: Failed, Reason: "failed: Timed out after 300s"}
	runs := map[string]Runs{"stock": {{"[It] new failure": fail}}, "critlet": {{"[It] new failure": fail}}}
	cmp := compare([]string{"stock", "critlet"}, runs)
	if p := verdict(focusSets["conformance"], cmp, runs, nil); len(p) != 1 || !strings.Contains(p[0], "no cause on this machine explains it") {
		t.Errorf("verdict on an unexplained failure: %v", p)
	}
}
