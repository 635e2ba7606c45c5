//go:build e2ecluster

package e2ecluster

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handlerLine is what critlet's kubelet logs once at start (and the stock
// kubelet never does): how the journal tells which kubelet runs.
const handlerLine = "critlet critical-pod admission handler installed"

// workload creates count sleeping pods bound to node and waits for them
// to run.
func (e *env) workload(t *testing.T, node string, count int) []string {
	t.Helper()
	var names []string
	var pods []pod
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s-work-%d", node, i)
		names = append(names, name)
		pods = append(pods, pod{name: name, node: node, resources: "{requests: {cpu: 10m, memory: 16Mi}}"})
	}
	e.apply(t, pods...)
	e.kubectl(t, append([]string{"wait", "--for=condition=Ready", "--timeout=180s", "pod"}, names...)...)
	return names
}

// waitPodReady waits until pod namespace/name exists and is Ready: a
// mirror pod appears only once the kubelet has seen its static pod, where
// kubectl wait fails at once.
func (e *env) waitPodReady(t *testing.T, namespace, name string, timeout time.Duration) {
	t.Helper()
	var last string
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(time.Second) {
		out, err := e.c.Kubectl(e.ctx, "n1", "get", "pod", "--namespace="+namespace, name, "-o",
			`jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status}`)
		last = strings.TrimSpace(out)
		if err == nil && last == "Running True" {
			return
		}
	}
	t.Fatalf("pod %s/%s not Ready within %s (last: %q)", namespace, name, timeout, last)
}

// containerState is a pod's container as the API shows it.
type containerState struct {
	ID       string
	Restarts int
	Running  bool
}

func (e *env) containers(t *testing.T, names []string) map[string]containerState {
	t.Helper()
	var pods struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				ContainerStatuses []struct {
					ContainerID  string
					RestartCount int
					State        struct{ Running *struct{} }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(e.kubectl(t, append([]string{"get", "pod", "-o", "json"}, names...)...)), &pods); err != nil {
		t.Fatal(err)
	}
	out := map[string]containerState{}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			out[p.Metadata.Name] = containerState{ID: c.ContainerID, Restarts: c.RestartCount, Running: c.State.Running != nil}
		}
	}
	return out
}

// tasks are containerd's tasks on machine name: container ID → "PID
// STATUS".
func (e *env) tasks(t *testing.T, name string) map[string]string {
	t.Helper()
	out := e.in(t, name, "ctr", "--namespace", "k8s.io", "tasks", "list")
	tasks := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) == 3 {
			tasks[f[0]] = f[1] + " " + f[2]
		}
	}
	return tasks
}

// kubeletPID is the kubelet's main PID on machine name (0: not running).
func (e *env) kubeletPID(t *testing.T, name string) string {
	return strings.TrimSpace(e.in(t, name, "systemctl", "show", "--property=MainPID", "--value", "kubelet"))
}

// journalSince is the kubelet's journal on machine name since the
// machine's clock read since.
func (e *env) journalSince(t *testing.T, name, since string) string {
	return e.in(t, name, "journalctl", "--unit=kubelet", "--no-pager", "--output=cat", "--since="+since)
}

// clock is machine name's time, as journalctl --since takes it.
func (e *env) clock(t *testing.T, name string) string {
	return strings.TrimSpace(e.in(t, name, "date", "+%Y-%m-%d %H:%M:%S"))
}

// waitHeartbeat waits until node reports Ready with a heartbeat after
// the control plane's clock read after: a kubelet started since then
// reports.
func (e *env) waitHeartbeat(t *testing.T, node string, after time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		out, err := e.c.Kubectl(e.ctx, "n1", "get", "node", node, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}`)
		if f := strings.Fields(out); err == nil && len(f) == 2 && f[0] == "True" {
			if hb, err := time.Parse(time.RFC3339, f[1]); err == nil && !hb.Before(after.Truncate(time.Second)) {
				return time.Since(start)
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("node %s reported no Ready heartbeat after %s within %s", node, after.Format(time.RFC3339), timeout)
	return 0
}

// kubeletVersion is the version the kubelet binary that make built
// reports: critlet's, or the stock one.
func kubeletVersion(t *testing.T, critlet bool) string {
	t.Helper()
	bin := "kubelet-stock"
	if critlet {
		bin = "kubelet"
	}
	out, err := exec.Command(filepath.Join(*repo, "_output/bin", bin), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
}

// waitKubeletVersion waits until node's status reports kubelet version
// want, and returns it.
func (e *env) waitKubeletVersion(t *testing.T, node, want string, timeout time.Duration) string {
	t.Helper()
	var got string
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(time.Second) {
		got = strings.TrimSpace(e.kubectl(t, "get", "node", node, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"))
		if got == want {
			return got
		}
	}
	t.Fatalf("node %s reports kubelet %s after %s, want %s", node, got, timeout, want)
	return ""
}

// swap installs critlet's package over the stock kubelet on n3, which
// runs pods, then the stock package back: the kubelet restarted by the
// packages (and, swapping back, by the operator as the package says),
// the node Ready, every container kept.
func (e *env) swap(t *testing.T) {
	const node = "n3"
	pods := e.workload(t, node, 3)
	kept := e.containers(t, pods)
	tasks := e.tasks(t, node)
	steps := []struct {
		name, deb string
		critlet   bool
	}{
		{"stock → critlet (apt-get install ./kubelet-critlet.deb)", e.pkgs.Critlet, true},
		{"critlet → stock (apt-get install ./kubelet.deb)", e.pkgs.Kubelet, false},
	}
	for _, s := range steps {
		pidBefore := e.kubeletPID(t, node)
		since := e.clock(t, node)
		start := time.Now()
		out, err := e.c.Install(e.ctx, node, s.deb)
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.name, err, out)
		}
		how := "the package"
		if !s.critlet {
			// The stock package starts no kubelet: critlet's prerm said
			// how to start it, and the operator does.
			if !strings.Contains(out, "systemctl enable --now kubelet") {
				t.Errorf("%s: critlet's removal did not say how to start the stock kubelet:\n%s", s.name, out)
			}
			e.in(t, node, "systemctl", "enable", "--now", "kubelet")
			how = "the operator, as critlet's removal said"
		}
		pidAfter := e.kubeletPID(t, node)
		if pidAfter == "0" || pidAfter == pidBefore {
			t.Fatalf("%s: the kubelet's main PID is %s, was %s: no kubelet restarted\n%s", s.name, pidAfter, pidBefore, out)
		}
		e.waitHeartbeat(t, node, start, 2*time.Minute)
		journal := e.journalSince(t, node, since)
		if got := strings.Contains(journal, handlerLine); got != s.critlet {
			t.Errorf("%s: critlet's start line in the kubelet's journal since the swap: %v, want %v", s.name, got, s.critlet)
		}
		// The node's status names the new kubelet once it has reported:
		// critlet's build is v1.37.2 with build metadata (semver-equal).
		version := e.waitKubeletVersion(t, node, kubeletVersion(t, s.critlet), 2*time.Minute)
		// The runtime's view first: the API's may still be the old
		// kubelet's. Each container is the same task, same process.
		nowTasks := e.tasks(t, node)
		same := 0
		for _, p := range pods {
			id := strings.TrimPrefix(kept[p].ID, "containerd://")
			if nowTasks[id] != tasks[id] || !strings.HasSuffix(tasks[id], " RUNNING") {
				t.Errorf("%s: pod %s's container %s in containerd: %q, was %q", s.name, p, id, nowTasks[id], tasks[id])
				continue
			}
			same++
		}
		now := e.containers(t, pods)
		for _, p := range pods {
			if now[p] != kept[p] || !now[p].Running {
				t.Errorf("%s: pod %s's container is %+v, was %+v", s.name, p, now[p], kept[p])
			}
		}
		e.row("| swap %s: kubelet restarted by %s (PID %s → %s), Ready heartbeat after | %s, kubelet %s, %d of %d containers kept (same process) |",
			s.name, how, pidBefore, pidAfter, time.Since(start).Round(time.Second), version, same, len(pods))
	}
	e.kubectl(t, append([]string{"delete", "pod", "--wait=false"}, pods...)...)
}

// reboot powers a worker off and boots it again: systemd brings
// containerd and the kubelet up, the node is Ready again, its pods run
// again (their containers made anew: a reboot ends them).
func (e *env) reboot(t *testing.T) {
	const node = "n2"
	pods := e.workload(t, node, 2)
	before := e.containers(t, pods)
	start := time.Now()
	if err := e.c.PowerOff(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	off := time.Since(start)
	booted := time.Now()
	if err := e.c.Boot(e.ctx, node); err != nil {
		t.Fatal(err)
	}
	boot := time.Since(booted)
	// Started by systemd at boot (enabled by the packages), each
	// within a minute; the kubelet's unit restarts it until it runs.
	for _, unit := range []string{"containerd", "kubelet"} {
		var st string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			out, _ := e.c.Exec(e.ctx, node, "systemctl", "is-active", unit)
			if st = strings.TrimSpace(out); st == "active" {
				break
			}
		}
		if st != "active" {
			t.Errorf("a minute after the boot %s is %s", unit, st)
		}
	}
	restarts := strings.TrimSpace(e.in(t, node, "systemctl", "show", "--property=NRestarts", "--value", "kubelet"))
	ready := e.waitHeartbeat(t, node, booted, 3*time.Minute)
	// The API shows the containers of before the boot until the kubelet
	// has started the pods again.
	var after map[string]containerState
	again := func() bool {
		after = e.containers(t, pods)
		for _, p := range pods {
			if after[p].ID == before[p].ID || !after[p].Running {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(3 * time.Minute); !again(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("pods after the reboot: %+v, before: %+v (want new running containers within 3m)", after, before)
		}
	}
	e.row("| reboot of %s: powered off in %s, systemd up in %s, kubelet restarted by its unit %s times, Ready heartbeat %s later, pods running again after | %s |",
		node, off.Round(time.Second), boot.Round(time.Second), restarts, ready.Round(time.Second), time.Since(start).Round(time.Second))
	e.kubectl(t, append([]string{"delete", "pod", "--wait=false"}, pods...)...)
}
