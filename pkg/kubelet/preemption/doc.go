// Package preemption admits critical pods that do not fit by preempting
// other pods: critlet's critical-pod-admission patch (pkg/patched).
//
// Its non-test Go files replace upstream's package
// k8s.io/kubernetes/pkg/kubelet/preemption whole: the build's overlay
// deletes upstream's files and compiles these under upstream's import path,
// so the kubelet's NewMainKubelet builds this handler through the unchanged
// constructor. The package therefore exports upstream's API and only that:
// CriticalPodAdmissionHandler, NewCriticalPodAdmissionHandler and its
// HandleAdmissionFailure. They also compile under this module's own path,
// for the package's tests (the differential tests run upstream's package
// beside it).
//
// What it may import: anything upstream's package could (it is compiled as
// part of upstream's module graph, and nothing upstream imports may import
// it back) and this module's ordinary packages. The work is theirs:
// planning (what is missing, which pods may go), victims (the pure
// selection), termination (running the kills), options (the settings),
// checkpoint (the record a restarted kubelet resumes from). The files here
// hold the stateful admission: one critical pod's rounds of victims
// (admission.go), their kills (termination.go), resuming a recorded
// preemption (resume.go), the events it reports (report.go) and its metrics
// (metrics.go).
package preemption
