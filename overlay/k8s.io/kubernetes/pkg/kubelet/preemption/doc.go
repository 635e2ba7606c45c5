// Package preemption admits critical pods that do not fit by preempting
// other pods: critlet's critical-pod-admission patch (pkg/patched).
//
// It replaces upstream's package k8s.io/kubernetes/pkg/kubelet/preemption
// whole (docs/patched-build.md), so NewMainKubelet builds this handler
// through the unchanged constructor. It therefore exports upstream's API
// and only that: CriticalPodAdmissionHandler,
// NewCriticalPodAdmissionHandler and its HandleAdmissionFailure.
//
// What it may import: anything upstream's package could (it is compiled as
// part of upstream's module graph, and nothing upstream imports may import
// it back) and this module's ordinary packages. The work is theirs:
// planning (what is missing, which pods may go), victims (the pure
// selection), termination (running the kills), checkpoint (the record a
// restarted kubelet resumes from), settings and kubeletstate (the settings
// and what the patches share), critletmetrics (the metrics). The files here
// hold the stateful admission: one critical pod's rounds of victims
// (admission.go), their kills (termination.go), resuming a recorded
// preemption (resume.go) and the events it reports (report.go).
package preemption
