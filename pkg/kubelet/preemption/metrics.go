package preemption

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
)

// critlet's metrics, beside the stock kubelet_preemptions counter (which is
// kept exactly: one increment per victim terminated, labelled by the first
// insufficient resource).
var (
	selectionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_selection_duration_seconds",
		Help:           "Time spent choosing the victims of one critical-pod admission, all re-planning rounds included.",
		Buckets:        metrics.ExponentialBuckets(0.00001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	admissionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_duration_seconds",
		Help:           "Time from the start of a critical pod's admission failure handling to its last victim terminated (or given up on).",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	victimsPerAdmission = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_victims",
		Help:           "Pods chosen as victims for one critical-pod admission, all re-planning rounds included.",
		Buckets:        []float64{0, 1, 2, 4, 8, 16, 32, 64, 128},
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	killFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_kill_failures_total",
		Help:           "Victims that failed to terminate, by cause: error (the pod workers reported one) or timeout (admission stopped waiting).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy", "cause"})
	replans = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_replans_total",
		Help:           "Re-planning rounds: further victims chosen because earlier ones failed to terminate.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"policy"})
	resumedPreemptions = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_resumed_total",
		Help:           "Preemptions an earlier kubelet began and recorded, continued by this one (--critical-preemption-resume).",
		StabilityLevel: metrics.ALPHA,
	})
	outageWaits = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      kubeletmetrics.KubeletSubsystem,
		Name:           "critical_preemption_outage_waits_total",
		Help:           "Further waits for a victim whose kill was being retried after the container runtime was unreachable (--critical-preemption-outage-recovery).",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// registerMetrics adds critlet's metrics to the registry the kubelet serves
// on /metrics. The kubelet registers its own in NewMainKubelet, which builds
// this handler, so this runs at the same point of start-up.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(selectionDuration, admissionDuration, victimsPerAdmission, killFailures, replans, resumedPreemptions, outageWaits)
	})
}
