//go:build e2enode

package e2enode

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Critical pods arriving together on a full node: eight pods ignoring
// SIGTERM (2 s grace period) fill it in equal shares, and critical pods of
// one share each arrive at once, two and then five. Each needs exactly one
// victim: after both waves seven pods are preempted, each once, one is
// left running, and every critical pod runs.
func TestConcurrentCriticalPods(t *testing.T) {
	runScenario(t, "16 critical pods arriving together", scenarioOptions{}, func(e *env) {
		const shares = 8
		all := e.allocatable()
		share := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(all.Cpu().MilliValue()/shares, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(all.Memory().Value()/shares, resource.BinarySI),
		}
		var specs []podSpec
		for i := range shares {
			specs = append(specs, stubborn(podSpec{name: fmt.Sprintf("filler-%d", i), requests: share}, 2))
		}
		fillers := e.createRunning(specs...)
		var crits []*v1.Pod
		var waves []string
		for _, n := range []int{2, 5} {
			var wave []podSpec
			for i := range n {
				wave = append(wave, critical(fmt.Sprintf("critical-%d-%d", n, i), share))
			}
			start := time.Now()
			created := e.createTogether(wave)
			for _, p := range created {
				e.waitPhase(p, 3*time.Minute, v1.PodRunning)
			}
			took := time.Since(start)
			crits = append(crits, created...)
			// A wrongly chosen further victim would follow after a grace period.
			got := e.waitVictims("", len(crits), 3*time.Second)
			if len(got) != len(crits) {
				e.t.Errorf("after %d critical pods, %d preempted (%v), want %d: one share each", len(crits), len(got), got, len(crits))
			}
			waves = append(waves, fmt.Sprintf("%d at once: all Running in %s", n, took.Round(10*time.Millisecond)))
			e.row.latency = took
		}
		e.note("%s (the time is the last wave's)", strings.Join(waves, "; "))
		got := e.victims()
		e.row.victims = got
		var survivors int
		for _, f := range fillers {
			if slices.Contains(got, f.Name) {
				e.expectPreempted(f, killed)
			} else {
				e.expectPhase(f, v1.PodRunning)
				survivors++
			}
		}
		if survivors != 1 {
			e.t.Errorf("%d of the fillers survived, want 1", survivors)
		}
		for _, c := range crits {
			cur := e.expectPhase(c, v1.PodRunning)
			if restarts(cur) != 0 {
				e.t.Errorf("critical pod %s restarted", c.Name)
			}
		}
	})
}

// createTogether creates the pods at the same moment, one request each in
// parallel.
func (e *env) createTogether(specs []podSpec) []*v1.Pod {
	e.t.Helper()
	out := make([]*v1.Pod, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			p := s.pod(e.node)
			out[i], errs[i] = e.c.CoreV1().Pods(p.Namespace).Create(e.ctx, p, metav1.CreateOptions{})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("creating %s: %w", s.name, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
	return out
}
