package e2enode

// This file has no build tag: the check runs in the node suite, and its
// unit test with the unit tests.

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// reasonPreempting is the reason of a victim's event and of its status.
const reasonPreempting = "Preempting"

// victimExit says how a victim's process meets SIGTERM.
type victimExit int

const (
	exitsOnTerm victimExit = iota // exits 0 (pause)
	killed                        // ignores it and is killed after the grace period
)

// raceNote names the stock kubelet's other ending for a victim that exited
// 0. Its status manager snapshots the statuses to write, then writes them
// one by one, so the kill's first status (Failed, Preempting) can reach the
// API after the containers stopped (seen with the API server paused during
// the kill: that status was written after the kill, then Succeeded). When
// the kubelet reads Failed back before it writes the final status, it keeps
// Failed, as it never moves a pod out of a terminal phase the API shows.
// Both kubelets do this; parallel kills put more statuses in one snapshot.
const raceNote = "ended Failed/Preempting though its container exited 0: the kubelet's status manager wrote the kill's first status after the kill had finished"

// removedNote names the second ending upstream's kubelet can give a
// victim that exited 0. Preemption kills as an eviction, and the kubelet's
// container garbage collector (a pass a minute, on its own goroutine)
// removes every exited container of an evicted pod at once, also while the
// pod's kill is still stopping the rest of it (another container, the
// sandbox). A container removed before the kill reads the pod's final
// status is missing from it, and the kubelet reports what it reports for a
// container it cannot find: exit 137, ContainerStatusUnknown, both as the
// container's last state ("could not be located when the pod was
// deleted") and, once the pod is terminal, as its state. Scenario 25 makes
// it happen on every kubelet; on a busy machine a slow sandbox stop gives
// a garbage collection pass the same window.
const removedNote = "ended with its container reported ContainerStatusUnknown/137: the kubelet's container garbage collection removed the exited container (an evicted pod's) before the kill's final status read it"

// Upstream's words for a container its final status could not find
// (status_manager.TerminatePod, kubelet_pods.convertToAPIContainerStatuses).
const (
	reasonStatusUnknown = "ContainerStatusUnknown"
	messageNotLocated   = "The container could not be located when the pod was terminated"
	messageRemoved      = "The container could not be located when the pod was deleted.  The container used to be Running"
)

// removedByKubelet reports whether c ended as upstream ends a container
// that was running when the pod's kill began and was gone from the
// runtime when the kill read the final status: its state and last state
// say so in upstream's words, and its restart count has the one restart
// upstream infers for a running container gone missing (none when
// restartsCounted is false: critlet's outage recovery withholds it for a
// pod being terminated).
func removedByKubelet(c v1.ContainerStatus, restartsCounted bool) bool {
	t, last := c.State.Terminated, c.LastTerminationState.Terminated
	restarts := int32(0)
	if restartsCounted {
		restarts = 1
	}
	return t != nil && last != nil && c.RestartCount == restarts &&
		t.ExitCode == 137 && t.Reason == reasonStatusUnknown && t.Message == messageNotLocated &&
		last.ExitCode == 137 && last.Reason == reasonStatusUnknown && last.Message == messageRemoved
}

// victimEnded reports whether status is final enough to judge: terminal,
// and for a victim that exits on SIGTERM, every container terminated (the
// phase can reach the API a sync before the containers' ends do).
func victimEnded(status v1.PodStatus, exit victimExit) bool {
	if status.Phase != v1.PodSucceeded && status.Phase != v1.PodFailed {
		return false
	}
	if exit != exitsOnTerm {
		return true
	}
	for _, c := range status.ContainerStatuses {
		if c.State.Terminated == nil {
			return false
		}
	}
	return len(status.ContainerStatuses) > 0
}

// checkVictimEnd checks a preempted pod's final status against what the
// stock kubelet gives it. A victim exiting 0 on SIGTERM must have had its
// grace period (every container exited 0) and ends Succeeded, or
// Failed/Preempting when the stock kubelet's status-write race (raceNote)
// hits or its container garbage collection removed an exited container
// during the kill (removedNote); note says which. A victim killed after
// its grace period ends Failed/Preempting. restartsCounted is false for a
// kubelet that counts no restart for a container lost while its pod is
// terminated.
func checkVictimEnd(status v1.PodStatus, exit victimExit, restartsCounted bool) (note string, err error) {
	switch exit {
	case exitsOnTerm:
		removed := false
		for _, c := range status.ContainerStatuses {
			switch t := c.State.Terminated; {
			case t != nil && t.ExitCode == 0:
			case removedByKubelet(c, restartsCounted):
				removed = true
			default:
				return "", fmt.Errorf("container %s ended %s, want exit 0 after SIGTERM within its grace period", c.Name, describeState(c.State))
			}
		}
		switch {
		case status.Phase == v1.PodSucceeded && !removed:
			return "", nil
		case status.Phase == v1.PodFailed && status.Reason == reasonPreempting && removed:
			return removedNote, nil
		case status.Phase == v1.PodFailed && status.Reason == reasonPreempting:
			return raceNote, nil
		}
		return "", fmt.Errorf("ended %s/%s, want Succeeded as the stock kubelet ends it (or Failed/%s when its status writes race or it removed the exited container first)", status.Phase, status.Reason, reasonPreempting)
	case killed:
		if status.Phase != v1.PodFailed || status.Reason != reasonPreempting {
			return "", fmt.Errorf("ended %s/%s, want Failed/%s", status.Phase, status.Reason, reasonPreempting)
		}
		return "", nil
	}
	return "", fmt.Errorf("unknown victim exit %d", exit)
}

func describeState(s v1.ContainerState) string {
	switch {
	case s.Terminated != nil:
		return fmt.Sprintf("terminated with exit code %d (%s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting (" + s.Waiting.Reason + ")"
	}
	return "in no state"
}

func TestCheckVictimEnd(t *testing.T) {
	exited := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	running := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	unknown := func(state, last string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: "c",
			State:                v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Reason: reasonStatusUnknown, Message: state}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Reason: reasonStatusUnknown, Message: last}},
		}
	}
	removed := unknown(messageNotLocated, messageRemoved)
	removed.RestartCount = 1
	notCounted := removed
	notCounted.RestartCount = 0
	lostOnly := removed
	lostOnly.LastTerminationState = v1.ContainerState{}
	sigkilled := exited(137)
	sigkilled.State.Terminated.Reason = "Error"
	status := func(phase v1.PodPhase, reason string, cs ...v1.ContainerStatus) v1.PodStatus {
		return v1.PodStatus{Phase: phase, Reason: reason, ContainerStatuses: cs}
	}
	cases := []struct {
		name     string
		status   v1.PodStatus
		exit     victimExit
		ended    bool
		wantNote string
		wantErr  bool
	}{
		{"exited 0, Succeeded", status(v1.PodSucceeded, "", exited(0)), exitsOnTerm, true, "", false},
		{"exited 0, the status race", status(v1.PodFailed, reasonPreempting, exited(0)), exitsOnTerm, true, raceNote, false},
		{"exited 0, Failed for another reason", status(v1.PodFailed, "Evicted", exited(0)), exitsOnTerm, true, "", true},
		{"killed though it exits on SIGTERM", status(v1.PodFailed, reasonPreempting, exited(137)), exitsOnTerm, true, "", true},
		{"Succeeded with one container killed", status(v1.PodSucceeded, "", exited(0), exited(137)), exitsOnTerm, true, "", true},
		{"phase ahead of the containers", status(v1.PodFailed, reasonPreempting, running), exitsOnTerm, false, "", true},
		{"no container status", status(v1.PodSucceeded, ""), exitsOnTerm, false, "", false},
		{"still running", status(v1.PodRunning, "", running), exitsOnTerm, false, "", true},
		{"exited container removed by the kubelet", status(v1.PodFailed, reasonPreempting, removed), exitsOnTerm, true, removedNote, false},
		{"one removed, one exited 0", status(v1.PodFailed, reasonPreempting, removed, exited(0)), exitsOnTerm, true, removedNote, false},
		{"removed, yet Succeeded", status(v1.PodSucceeded, "", removed), exitsOnTerm, true, "", true},
		{"removed, Failed for another reason", status(v1.PodFailed, "Evicted", removed), exitsOnTerm, true, "", true},
		{"not located, never seen gone", status(v1.PodFailed, reasonPreempting, lostOnly), exitsOnTerm, true, "", true},
		{"not located, in other words", status(v1.PodFailed, reasonPreempting, unknown(messageNotLocated, "gone")), exitsOnTerm, true, "", true},
		{"killed by SIGKILL though it exits on SIGTERM", status(v1.PodFailed, reasonPreempting, sigkilled), exitsOnTerm, true, "", true},
		{"removed, no restart inferred", status(v1.PodFailed, reasonPreempting, notCounted), exitsOnTerm, true, "", true},
		{"killed victim", status(v1.PodFailed, reasonPreempting, exited(137)), killed, true, "", false},
		{"killed victim Succeeded", status(v1.PodSucceeded, "", exited(0)), killed, true, "", true},
		{"killed victim, phase only", status(v1.PodFailed, reasonPreempting, running), killed, true, "", false},
	}
	for _, c := range cases {
		if got := victimEnded(c.status, c.exit); got != c.ended {
			t.Errorf("%s: victimEnded = %v, want %v", c.name, got, c.ended)
		}
		note, err := checkVictimEnd(c.status, c.exit, true)
		if (err != nil) != c.wantErr || note != c.wantNote {
			t.Errorf("%s: checkVictimEnd = %q, %v; want note %q, error %v", c.name, note, err, c.wantNote, c.wantErr)
		}
	}
	// A kubelet that counts no restart for a container lost while its pod
	// is terminated (critlet's outage recovery).
	if note, err := checkVictimEnd(status(v1.PodFailed, reasonPreempting, notCounted), exitsOnTerm, false); note != removedNote || err != nil {
		t.Errorf("removed, restart withheld by the kubelet: checkVictimEnd = %q, %v; want note %q", note, err, removedNote)
	}
	if _, err := checkVictimEnd(status(v1.PodFailed, reasonPreempting, removed), exitsOnTerm, false); err == nil {
		t.Error("removed with a restart counted, by a kubelet that withholds it: accepted")
	}
	if _, err := checkVictimEnd(status(v1.PodFailed, reasonPreempting, exited(137)), victimExit(7), true); err == nil {
		t.Error("an unknown victim exit was accepted")
	}
}
