// Package critletmetrics holds every metric critlet's patches add, beside
// the stock kubelet's (whose kubelet_preemptions counter the admission
// handler keeps exactly: one increment per victim terminated, labelled by
// the first insufficient resource).
//
// All are registered together by Register, which the admission handler's
// constructor calls: NewMainKubelet builds that handler once, at the point
// of start-up where the kubelet registers its own metrics, whatever the
// settings. A patch that is off leaves its metrics at zero.
package critletmetrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// subsystem is the stock kubelet's, so critlet's metrics sit beside its own.
const subsystem = "kubelet"

// The critical-pod-admission patch's.
var (
	SelectionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_selection_duration_seconds",
		Help:           "Time spent choosing the victims of one critical-pod admission, all re-planning rounds included.",
		Buckets:        metrics.ExponentialBuckets(0.00001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	AdmissionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_duration_seconds",
		Help:           "Time from the start of a critical pod's admission failure handling to its last victim terminated (or given up on).",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	VictimsPerAdmission = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_victims",
		Help:           "Pods chosen as victims for one critical-pod admission, all re-planning rounds included.",
		Buckets:        []float64{0, 1, 2, 4, 8, 16, 32, 64, 128},
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	KillFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_kill_failures_total",
		Help:           "Victims that failed to terminate, by cause: error (the pod workers reported one) or timeout (admission stopped waiting).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy", "cause"})
	Replans = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_replans_total",
		Help:           "Re-planning rounds: further victims chosen because earlier ones failed to terminate.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
)

// The preemption-resume patch's.
var ResumedPreemptions = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      subsystem,
	Name:           "critical_preemption_resumed_total",
	Help:           "Preemptions an earlier kubelet began and recorded, continued by this one (--critical-preemption-resume).",
	StabilityLevel: metrics.ALPHA,
})

// The outage-recovery patch's.
var (
	OutageWaits = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "critical_preemption_outage_waits_total",
		Help:           "Further waits for a victim whose kill was being retried after the container runtime was unreachable (--critical-preemption-outage-recovery).",
		StabilityLevel: metrics.ALPHA,
	})
	UnreachableKillRetries = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "runtime_unreachable_kill_retries_total",
		Help:           "Kills of terminating pods retried early by critlet's outage-recovery because the container runtime was unreachable.",
		StabilityLevel: metrics.ALPHA,
	})
)

// The static-pod-readmission patch's.
var ReadmissionAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      subsystem,
	Name:           "static_pod_readmission_attempts_total",
	Help:           "Admissions of refused static pods tried again by critlet's static-pod-readmission, by result: admitted or refused.",
	StabilityLevel: metrics.ALPHA,
}, []string{"result"})

// The critical-device-preemption patch's.
var DevicePreemptions = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      subsystem,
	Name:           "critical_device_preemptions_total",
	Help:           "Critical pods refused for lack of device-plugin devices that critlet's critical-device-preemption took up, by result: admitted (allocated; a later admit handler may still refuse), no_victims (no set of pods frees enough), not_freed (the victims that terminated did not cover the shortfall), refused (refused again although they did) or unsupported_node (the node's topology, CPU or memory manager policy could refuse the freed devices: nothing killed).",
	StabilityLevel: metrics.ALPHA,
}, []string{"result"})

// The device-readmission patch's.
var DeviceReadmissions = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      subsystem,
	Name:           "device_readmissions_total",
	Help:           "Pods refused for a device plugin not back yet that critlet's device-readmission took up, by result: held (each refusal that holds a pod, retries included), admitted, refused (refused again for something else, or deleted while held) or window_closed (still held when the window closed).",
	StabilityLevel: metrics.ALPHA,
}, []string{"result"})

var registerOnce sync.Once

// Register adds every metric above to the registry the kubelet serves on
// /metrics; calls after the first do nothing.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(SelectionDuration, AdmissionDuration, VictimsPerAdmission, KillFailures, Replans,
			ResumedPreemptions, OutageWaits, UnreachableKillRetries, ReadmissionAttempts, DevicePreemptions,
			DeviceReadmissions)
	})
}
