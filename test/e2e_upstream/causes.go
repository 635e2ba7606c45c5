package main

import "regexp"

// cause explains why a test fails or skips on this machine whatever the
// kubelet: what the machine lacks that upstream's CI nodes have. A test
// that fails or skips alike on every kubelet must have one; the report
// groups such tests by cause and lists any without.
type cause struct {
	why string
	// test and reason match the test's JUnit name and its failure or skip
	// reason; a nil pattern matches anything, and at least one is set.
	test, reason *regexp.Regexp
}

func (c cause) matches(test, reason string) bool {
	return (c.test == nil || c.test.MatchString(test)) && (c.reason == nil || c.reason.MatchString(reason))
}

// causes are tried in order; the first that matches explains the test.
// Each was found in the suite's logs on this machine (see the closing
// notes of the work that added it).
var causes = []cause{{
	why:    "Debian's busybox has no nmeter applet: the test's containers time-stamp their log lines with it, and the test cannot parse them",
	reason: regexp.MustCompile(`nmeter: not found|parsing time "\d{4}-\d\d-\d\dTZ`),
}, {
	why:    "an earlier test of its ordered container failed, for one of the causes here",
	reason: regexp.MustCompile(`earlier spec in an ordered container failed`),
}, {
	why:  "its static pods run registry.k8s.io/e2e-test-images/nginx, which cannot be made here: there is no registry",
	test: regexp.MustCompile(`\] MirrorPod `),
}, {
	why:    "pulls an image from a registry (glibc-dns-testing, nonroot, nonewprivs, or agnhost again after an image change): there is none here; the images built here are pause, agnhost and busybox",
	reason: regexp.MustCompile(`Back-off pulling image|ErrImagePull|ImagePullBackOff`),
}, {
	why:  "needs what upstream's agnhost image adds to Alpine (bash, curl, netcat, the porter's TLS key pair); this agnhost rests on Debian's busybox",
	test: regexp.MustCompile(`Probing (restartable init )?container should mark readiness on pods to false|Lifecycle Hook when create a pod with lifecycle hook should execute (prestop|poststart) (exec|https) hook|Networking Granular Checks: Pods should function for (intra-pod|node-pod) communication`),
}, {
	why:  "runs /bin/top or /bin/sysctl: upstream's busybox image links every applet in /bin, Debian's busybox puts top in /usr/bin and sysctl in /sbin",
	test: regexp.MustCompile(`Container PID namespace sharing|Sysctls \[LinuxOnly\] should support sysctls`),
}, {
	why:  "its container runs `sh -c env`, and Debian's busybox sh does not pass on a variable whose name is not a shell identifier (data-1)",
	test: regexp.MustCompile(`\] (Secrets|ConfigMap) should be consumable via the environment`),
}, {
	why:  "expects the kubelet's and the runtime's system containers (--kubelet-cgroups, --runtime-cgroups, --system-cgroups), which the runner turns off: they would move the host's processes",
	test: regexp.MustCompile(`Summary API when querying /stats/summary should report resource usage`),
}, {
	why:  "cAdvisor reports no metric for the test's containers: it looks for containerd at /run/containerd/containerd.sock, and this node's containerd listens in its state directory so that a host's own containerd is never touched",
	test: regexp.MustCompile(`ContainerMetrics \[LinuxOnly\] when querying /metrics/cadvisor`),
}, {
	why:  "needs containerd's RuntimeClass handler test-handler, which upstream's node images configure; this node's containerd has runc only",
	test: regexp.MustCompile(`PodOverhead cgroup accounting`),
}, {
	why:  "looks for the pods' cgroups at the cgroup hierarchy's root; here they are under /critlet (the kubelet's cgroupRoot), so that nothing touches the host's cgroups",
	test: regexp.MustCompile(`Kubelet Cgroup Manager (Pod|QOS) containers`),
}, {
	why:  "recursive read-only mounts need containerd 2 and runc 1.1 on kernel 5.12; Debian's containerd is 1.6.20",
	test: regexp.MustCompile(`Mount recursive read-only`),
}, {
	why:    "this kernel has no dummy network device",
	reason: regexp.MustCompile(`RTNETLINK answers: Operation not supported`),
}}

// causeOf returns the cause explaining a failure or skip, or "".
func causeOf(test, reason string) string {
	for _, c := range causes {
		if c.matches(test, reason) {
			return c.why
		}
	}
	return ""
}
