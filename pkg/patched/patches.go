package patched

const critletModule = "github.com/critlet/critlet"

// Patches is the one declaration of critlet's changes to upstream: the
// overlay generator, the build checks, the kubelet's guard, its settings
// and its settings line all read it. Each patch is also named below, for
// the code that asks whether it is on.
var Patches = []Patch{CriticalPodAdmission, StaticPodReadmission, PreemptionResume, OutageRecovery, CriticalDevicePreemption, DeviceReadmission}

var (
	CriticalPodAdmission = Patch{
		Name:   "critical-pod-admission",
		Change: "critical pods' victims chosen by a pure, tested selection (optionally by priority) and terminated in parallel, failed kills optionally re-planned; the stock kubelet's choices by default",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/135857",
			"https://github.com/kubernetes/kubernetes/issues/78405",
		},
		Package:  "pkg/kubelet/preemption",
		Replaces: true,
		Proof: []Reach{{
			From: UpstreamModule + "/pkg/kubelet/preemption.(*CriticalPodAdmissionHandler).HandleAdmissionFailure",
			To:   critletModule + "/pkg/victims.Select",
		}},
	}
	StaticPodReadmission = Patch{
		Name:   "static-pod-readmission",
		Change: "a static pod refused at admission is admitted again, through the same admit handlers, once room may have appeared",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/138391",
			"https://github.com/kubernetes/kubernetes/issues/116484",
			"https://github.com/kubernetes/kubernetes/issues/111174",
		},
		Setting:     "critical-static-pod-readmission",
		SettingHelp: "Admit a static pod again, through the same admit handlers, once a pod active at its refusal has left or its backoff (2s doubling to 1m) has expired; off (default), a refused static pod stays Failed until the kubelet restarts, as with the stock kubelet.",
		Package:     "pkg/kubelet",
		Hooks: []Hook{
			{
				// Every refusal of a new pod passes here.
				File: "pkg/kubelet/kubelet.go",
				Func: "(*Kubelet).HandlePodAdditions",
				Line: "kl.rejectPod(ctx, pod, reason, message)",
				Call: "kl.critletAdmissionRefused(ctx, pod, reason)",
			},
			{
				// Housekeeping runs every two seconds on the sync loop's
				// goroutine, the one HandlePodAdditions runs on, once all
				// pod sources are ready: retries never race an admission.
				File: "pkg/kubelet/kubelet.go",
				Func: "(*Kubelet).syncLoopIteration",
				Line: `logger.V(4).Info("SyncLoop (housekeeping) end", "duration", duration.Round(time.Millisecond))`,
				Call: "kl.critletRetryRefusedAdmissions(ctx)",
			},
		},
		Proof: []Reach{
			{
				From: UpstreamModule + "/pkg/kubelet.(*Kubelet).HandlePodAdditions",
				To:   critletModule + "/pkg/readmission.(*Queue).Refused",
			},
			{
				From: UpstreamModule + "/pkg/kubelet.(*Kubelet).syncLoopIteration",
				To:   critletModule + "/pkg/readmission.(*Queue).Due",
			},
		},
	}
	PreemptionResume = Patch{
		Name:   "preemption-resume",
		Change: "each critical-pod preemption's victims are recorded under the kubelet's root directory before the first is killed, and a kubelet restarted mid-preemption continues it: the same victims, their remaining grace period, no second Preempting event",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/112360",
			"https://github.com/kubernetes/kubernetes/issues/125774",
			"https://github.com/kubernetes/kubernetes/issues/78405",
		},
		Setting:     "critical-preemption-resume",
		SettingHelp: "Record each preemption's victims in a checkpoint under the kubelet's root directory before the first is killed, so a kubelet restarted mid-preemption continues it: the same victims, their remaining grace period, no second Preempting event; off (default), it preempts anew, as the stock kubelet.",
		Package:     "pkg/kubelet",
		Hooks: []Hook{{
			// The handler is built here, with upstream's fixed signature;
			// only NewMainKubelet knows the root directory.
			File: "pkg/kubelet/kubelet.go",
			Func: "NewMainKubelet",
			Line: "criticalPodAdmissionHandler := preemption.NewCriticalPodAdmissionHandler(klet.getAllocatedPods, killPodNow(ctx, klet.podWorkers, kubeDeps.Recorder), kubeDeps.Recorder)",
			Call: "critletResumePreemptions(ctx, rootDirectory, kubeDeps.EventClient, nodeName)",
		}},
		Proof: []Reach{{
			From: UpstreamModule + "/pkg/kubelet.NewMainKubelet",
			To:   critletModule + "/pkg/checkpoint.Open",
		}},
	}
	OutageRecovery = Patch{
		Name:   "outage-recovery",
		Change: "a terminating pod's kill that failed with the container runtime unreachable is retried as soon as the runtime answers, and a container the runtime lost while its pod was being terminated is not counted as a restart",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/92906",
			"https://github.com/kubernetes/kubernetes/issues/78405",
		},
		Setting:     "critical-preemption-outage-recovery",
		SettingHelp: "Retry a pod's kill that failed because the container runtime was unreachable as soon as it answers (backoff 250ms doubling to the pod workers' 10s), with the grace it has left, rather than after the pod workers' 10s with a new grace, let admission wait on for such a victim, and never count a container the runtime lost while its pod was being terminated as a restart; off (default), as the stock kubelet.",
		Package:     "pkg/kubelet",
		Hooks: []Hook{
			{
				// After upstream queued the failed sync for its backoff.
				File: "pkg/kubelet/pod_workers.go",
				Func: "(*podWorkers).completeWork",
				Line: "p.workQueue.Enqueue(podUID, wait.Jitter(backoff, workerBackOffPeriodJitterFactor))",
				Call: "p.critletRetryUnreachableKill(logger, podUID, syncErr)",
			},
			{
				// Upstream infers a restart for a container gone missing
				// from the runtime's answer unless the pod was deleted.
				File: "pkg/kubelet/kubelet_pods.go",
				Func: "(*Kubelet).convertToAPIContainerStatuses",
				Line: "status.RestartCount += 1",
				Call: "status.RestartCount -= kl.critletRestartsNotCounted(logger, pod, status)",
			},
		},
		Proof: []Reach{
			{
				From: UpstreamModule + "/pkg/kubelet.(*podWorkers).completeWork",
				To:   critletModule + "/pkg/killretry.(*Tracker).Failed",
			},
			{
				From: UpstreamModule + "/pkg/kubelet.(*Kubelet).convertToAPIContainerStatuses",
				To:   UpstreamModule + "/pkg/kubelet.(*Kubelet).critletRestartsNotCounted",
			},
		},
	}
	CriticalDevicePreemption = Patch{
		Name:   "critical-device-preemption",
		Change: "a critical pod the container manager refuses for lack of device-plugin devices preempts pods holding them, chosen with any cpu or memory shortfall in one selection, and is held, the sync loop going on, until their kills have ended, then admitted again through every admit handler",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/117955",
			"https://github.com/kubernetes/kubernetes/issues/78405",
		},
		Setting:     "critical-preemption-devices",
		SettingHelp: "When the container manager refuses a critical pod for lack of devices of a device-plugin resource, preempt non-critical pods holding them (chosen with any cpu or memory shortfall in one selection, by the same rules and policy), hold the pod (no status, no start) while they terminate, the sync loop going on (other critical pods short of devices wait their turn), then admit it again through every admit handler; refused with the device manager's reason when no set of pods frees enough; off (default), the pod is refused and nothing is preempted, as with the stock kubelet.",
		Package:     "pkg/kubelet/cm",
		Hooks: []Hook{
			{
				// Where the allocate handler joins the chain (a test
				// container manager makes a new one per call, so it is
				// found by place, not by identity).
				File: "pkg/kubelet/kubelet.go",
				Func: "NewMainKubelet",
				Line: "handlers = append(handlers, klet.containerManager.GetAllocateResourcesPodAdmitHandler(logger))",
				Call: "critletAllocateAt := len(handlers) - 1",
			},
			{
				// The allocate handler and the critical-pod handler meet
				// only here, where NewMainKubelet builds the chain.
				File: "pkg/kubelet/kubelet.go",
				Func: "NewMainKubelet",
				Line: "handlers = append(handlers, lifecycle.NewPredicateAdmitHandler(klet.GetCachedNode, criticalPodAdmissionHandler, klet.containerManager.UpdatePluginResources))",
				Call: "handlers = cm.CritletPreemptDevices(ctx, handlers, critletAllocateAt, kubeCfg, klet.containerManager, klet.GetCachedNode, klet.containerManager.UpdatePluginResources, criticalPodAdmissionHandler, klet.GetActivePods, klet.critletAwaitsAdmission, kubeDeps.Recorder)",
			},
		},
		Proof: []Reach{{
			From: UpstreamModule + "/pkg/kubelet.NewMainKubelet",
			To:   UpstreamModule + "/pkg/kubelet/cm.CritletPreemptDevices",
		}},
	}
	DeviceReadmission = Patch{
		Name:   "device-readmission",
		Change: "a pod refused at admission because a device plugin it needs is not back yet (no healthy device of its resource), within a window after the kubelet starts, is held rather than failed and admitted again through every admit handler once the plugin is back; refused with upstream's reason when the window closes",
		Issues: []string{
			"https://github.com/kubernetes/kubernetes/issues/117955",
			"https://github.com/kubernetes/kubernetes/issues/125579",
			"https://github.com/kubernetes/kubernetes/issues/133382",
			"https://github.com/kubernetes/kubernetes/issues/138446",
		},
		Setting:     "critical-device-readmission",
		SettingHelp: "Hold a pod that the container manager refuses because a device plugin it needs has no healthy device yet (not registered again after a kubelet restart or a reboot), during --critical-device-readmission-window after the kubelet starts, and admit it again through every admit handler once the plugin is back; refused with the device manager's reason when the window closes; off (default), the pod fails at once, as with the stock kubelet.",
		Package:     "pkg/kubelet",
		Hooks: []Hook{
			{
				// Before the refusal is written: a held pod is neither
				// rejected nor handed to the pod workers.
				File: "pkg/kubelet/kubelet.go",
				Func: "(*Kubelet).HandlePodAdditions",
				Line: "if ok, reason, message := kl.allocationManager.AddPod(ctx, kl.GetActivePods(), pod); !ok {",
				Call: "if kl.critletHoldForDevices(ctx, pod, reason, message) { continue }",
			},
			{
				// Housekeeping, on the sync loop's goroutine as admissions
				// are, once all pod sources are ready.
				File: "pkg/kubelet/kubelet.go",
				Func: "(*Kubelet).syncLoopIteration",
				Line: `logger.V(4).Info("SyncLoop (housekeeping)")`,
				Call: "kl.critletRetryHeldForDevices(ctx)",
			},
			{
				// Every path that starts or syncs a pod meets here (its
				// mirror pod added or removed, housekeeping, syncs,
				// updates): a held pod's update is dropped, a kill taken.
				File: "pkg/kubelet/pod_workers.go",
				Func: "(*podWorkers).UpdatePod",
				Line: `updateLogger := logger.WithValues("pod", klog.KRef(ns, name), "podUID", uid, "updateType", options.UpdateType)`,
				Call: "if critletPassOverHeld(p, updateLogger, uid, options.UpdateType) { return }",
			},
			{
				// Housekeeping counts the active pods and restarts those
				// the pod workers do not know: a held pod is neither.
				File: "pkg/kubelet/kubelet_pods.go",
				Func: "(*Kubelet).HandlePodCleanups",
				Line: "activePods := kl.filterOutInactivePods(allPods)",
				Call: "activePods = kl.critletNotHeldForDevices(activePods)",
			},
		},
		Proof: []Reach{
			{
				From: UpstreamModule + "/pkg/kubelet.(*Kubelet).HandlePodAdditions",
				To:   critletModule + "/pkg/devicewait.(*Holds).Hold",
			},
			{
				From: UpstreamModule + "/pkg/kubelet.(*Kubelet).syncLoopIteration",
				To:   critletModule + "/pkg/devicewait.(*Holds).Next",
			},
			{
				From: UpstreamModule + "/pkg/kubelet.(*podWorkers).UpdatePod",
				To:   UpstreamModule + "/pkg/kubelet.critletPassOverHeld",
			},
		},
	}
)

// Named returns the declared patch called name.
func Named(name string) (Patch, bool) {
	for _, p := range Patches {
		if p.Name == name {
			return p, true
		}
	}
	return Patch{}, false
}
