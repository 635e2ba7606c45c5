// Package explain answers, for one node and one critical pod, what the
// kubelet's admission would do: whether the pod fits, what it lacks, and
// which pods critical-pod preemption would take under each policy.
//
// The shortfall comes from the kubelet's own admission predicate
// (k8s.io/kubernetes/pkg/kubelet/lifecycle), the victims from the handler's
// own choice (planning.Plan). The core (explain.go, priority.go) is pure:
// objects in, an Explanation out. The I/O sits at the edges: input.go
// decodes files, live.go reads a node's pods and priority classes from the
// API server through client-go, print.go writes the answer.
package explain

import (
	v1 "k8s.io/api/core/v1"

	"github.com/critlet/critlet/pkg/victims"
)

// The output schema: Explanation and the types below are what -o json and
// -o yaml print. Fields are only ever added within one apiVersion.
const (
	APIVersion = "explain.critlet.io/v1"
	Kind       = "Explanation"
)

// Verdict is what admission does with the pod.
type Verdict string

const (
	// Fits: the pod is admitted without preempting anything.
	Fits Verdict = "Fits"
	// AdmittedAfterPreemption: the pod lacks resources that preempting
	// the listed victims frees.
	AdmittedAfterPreemption Verdict = "AdmittedAfterPreemption"
	// Rejected: admission refuses the pod, for a reason preemption cannot
	// fix or because no set of pods frees enough.
	Rejected Verdict = "Rejected"
)

// ExitCode is the command's exit status for a verdict. None is 1 or 2,
// what a Go program exits with on log.Fatal (and go run for any failure)
// and on a panic or runtime fatal error: a crash never reads as a verdict.
// The command's own failures take 3 and 4.
func (v Verdict) ExitCode() int {
	switch v {
	case Fits:
		return 0
	case AdmittedAfterPreemption:
		return 5
	}
	return 6
}

// Explanation is the answer for one pod on one node.
type Explanation struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Node       string `json:"node"`
	Pod        PodRef `json:"pod"`
	// ActivePods counts the pods admission sees on the node.
	ActivePods int `json:"activePods"`
	// Verdict is the outcome; with several policies, the first one's (the
	// policies agree on it: each can use every candidate).
	Verdict Verdict `json:"verdict"`
	// Reason is the kubelet's reason for a rejection (OutOfcpu,
	// NodeAffinity, …), empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Message is the kubelet's message for a rejection, or what the
	// predicate reported when the pod does not fit.
	Message string `json:"message,omitempty"`
	// Shortfall lists what the pod lacks, in the predicate's order.
	Shortfall []Shortage `json:"shortfall,omitempty"`
	// Policies holds one plan per policy asked for; none when the pod fits
	// or preemption cannot help.
	Policies []PolicyPlan `json:"policies,omitempty"`
}

// PodRef names the pod explained and how it counts as critical.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Priority is the pod's resolved priority.
	Priority int32 `json:"priority"`
	// PriorityClassName is the class it was resolved from, if any.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Static: the pod is a static pod (critical whatever its priority).
	Static bool `json:"static"`
}

// Shortage is one resource the pod lacks, with the predicate's figures.
type Shortage struct {
	Resource string `json:"resource"`
	// Device: a device-plugin resource, counted as the device manager
	// allocates (healthy devices, those active pods hold).
	Device bool `json:"device,omitempty"`
	// Missing is Requested - (Capacity - Used), in the resource's base
	// unit (millicores for cpu, bytes for memory, a count otherwise).
	Missing   int64 `json:"missing"`
	Requested int64 `json:"requested"`
	Used      int64 `json:"used"`
	Capacity  int64 `json:"capacity"`
}

// PolicyPlan is one policy's choice.
type PolicyPlan struct {
	Policy  victims.Policy `json:"policy"`
	Verdict Verdict        `json:"verdict"`
	// Error says why no set of pods works, for a Rejected verdict.
	Error   string   `json:"error,omitempty"`
	Victims []Victim `json:"victims"`
	// Freed totals the victims' requests for each resource of the
	// shortfall, in base units.
	Freed map[string]int64 `json:"freed,omitempty"`
}

// Victim is one pod the policy preempts, in the order it is terminated.
type Victim struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	UID       string         `json:"uid,omitempty"`
	QOS       v1.PodQOSClass `json:"qos"`
	Priority  int32          `json:"priority"`
	// CPU (millicores) and Memory (bytes) are the pod's requests as
	// admission counts them.
	CPU    int64 `json:"cpuMillis"`
	Memory int64 `json:"memoryBytes"`
	// Devices is what the pod holds of each device-plugin resource.
	Devices map[string]int64 `json:"devices,omitempty"`
}
