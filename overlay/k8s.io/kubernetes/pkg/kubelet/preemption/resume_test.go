package preemption

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/settings"
)

// installStore installs a checkpoint store under a fresh root for the test.
func installStore(t *testing.T) (*checkpoint.Store, string) {
	t.Helper()
	root := t.TempDir()
	s, err := checkpoint.Open(klog.Background(), root, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	kubeletstate.SetCheckpoints(s)
	t.Cleanup(func() { kubeletstate.SetCheckpoints(nil) })
	return s, root
}

type killCall struct {
	pod      string
	override *int64
}

// recordingKill records each kill and its grace override.
type recordingKill struct {
	mu    sync.Mutex
	calls []killCall
	also  func(pod *v1.Pod) error
}

func (k *recordingKill) kill(pod *v1.Pod, _ bool, override *int64, _ func(*v1.PodStatus)) error {
	k.mu.Lock()
	k.calls = append(k.calls, killCall{pod.Name, override})
	k.mu.Unlock()
	if k.also != nil {
		return k.also(pod)
	}
	return nil
}

func (k *recordingKill) names() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, c := range k.calls {
		out = append(out, c.pod)
	}
	slices.Sort(out)
	return out
}

func drainEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func count(events []string, reason string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

var resumeCast = []*v1.Pod{bestEffortPod, smallBurstable, largeBurstable, smallGuaranteed, largeGuaranteed}

// admitCritical has a handler under opts admit the cluster-critical pod,
// short of mib MiB, among resumeCast, killing with k; it returns the events.
func admitCritical(t *testing.T, opts settings.Settings, k *recordingKill, mib int64) []string {
	t.Helper()
	rec := record.NewFakeRecorder(20)
	h := newHandler(func() []*v1.Pod { return resumeCast }, k.kill, rec, opts)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(mib), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	return drainEvents(rec)
}

func resuming() settings.Settings {
	o := settings.Defaults()
	o = o.With(patched.PreemptionResume, true)
	return o
}

// A kubelet restarted mid-preemption finds the victims an earlier one
// recorded: it kills those, the one already signalled with the grace it has
// left and no second Preempting event, the one never started in full and
// with its event; then it clears the record.
func TestResumeContinuesTheRecordedPreemption(t *testing.T) {
	store, _ := installStore(t)
	began := time.Now().Add(-4 * time.Second)
	recordSignalled(t, store, began)
	k := &recordingKill{}
	k.also = func(pod *v1.Pod) error {
		// The record goes on as it began: it ages from the first kill.
		if p, ok := store.Find(clusterCritPod.UID); !ok || !p.Started.Equal(began) {
			t.Errorf("killing %s: the record began at %v (found %v), want %v", pod.Name, p.Started, ok, began)
		}
		return nil
	}
	events := admitCritical(t, resuming(), k, 550)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, largeGuaranteed.Name}) {
		t.Fatalf("killed %v, want the recorded victims", got)
	}
	for _, c := range k.calls {
		switch c.pod {
		case largeBurstable.Name:
			// 6s left, less whatever this machine took since (a busy one
			// may take seconds): never the whole grace again.
			if c.override == nil || *c.override < 1 || *c.override > 6 {
				t.Errorf("signalled 4s ago with grace 10s: override %v, want at most the 6s left", c.override)
			}
		case largeGuaranteed.Name:
			if c.override != nil {
				t.Errorf("never signalled: override %d, want its own grace", *c.override)
			}
		}
	}
	if n := count(events, "Preempting"); n != 1 {
		t.Errorf("%d Preempting events, want 1 (only the victim never signalled): %q", n, events)
	}
	if _, ok := store.Find(clusterCritPod.UID); ok {
		t.Error("the finished preemption is still recorded")
	}
}

// recordSignalled records, as an earlier kubelet would have, a preemption
// for the cluster-critical pod begun at began: largeBurstable signalled,
// largeGuaranteed not yet.
func recordSignalled(t *testing.T, store *checkpoint.Store, began time.Time) {
	t.Helper()
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Namespace: clusterCritPod.Namespace, Name: clusterCritPod.Name, Started: began,
		Victims: []checkpoint.Victim{
			{UID: largeBurstable.UID, Namespace: "default", Name: largeBurstable.Name, GracePeriodSeconds: 10, KillStarted: began},
			{UID: largeGuaranteed.UID, Namespace: "default", Name: largeGuaranteed.Name, GracePeriodSeconds: 10},
		}}); err != nil {
		t.Fatal(err)
	}
}

// The victims are on disk before the first kill, each kill's start before
// that kill; the record is gone once admission ends.
func TestResumeRecordsBeforeKilling(t *testing.T) {
	_, root := installStore(t)
	k := &recordingKill{}
	k.also = func(pod *v1.Pod) error {
		// What a kubelet starting now would read.
		s, err := checkpoint.Open(klog.Background(), root, time.Now)
		if err != nil {
			return err
		}
		p, ok := s.Find(clusterCritPod.UID)
		if !ok || len(p.Victims) != 2 {
			t.Errorf("killing %s: recorded %+v, %v; want both victims", pod.Name, p, ok)
			return nil
		}
		for _, v := range p.Victims {
			if v.UID == pod.UID && v.KillStarted.IsZero() {
				t.Errorf("killing %s before its start was recorded", pod.Name)
			}
		}
		return nil
	}
	events := admitCritical(t, resuming(), k, 550)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, largeGuaranteed.Name}) {
		t.Fatalf("killed %v", got)
	}
	if n := count(events, "Preempting"); n != 2 {
		t.Errorf("%d Preempting events, want 2", n)
	}
	s, err := checkpoint.Open(klog.Background(), root, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Find(clusterCritPod.UID); ok {
		t.Error("the finished preemption is still on disk")
	}
}

// Without the setting a record is neither read nor written: a restarted
// kubelet preempts anew, as the stock kubelet.
func TestResumeOffIgnoresTheRecord(t *testing.T) {
	store, _ := installStore(t)
	prior := checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: time.Now(),
		Victims: []checkpoint.Victim{{UID: smallBurstable.UID, GracePeriodSeconds: 10, KillStarted: time.Now()}}}
	if err := store.Record(prior); err != nil {
		t.Fatal(err)
	}
	k := &recordingKill{}
	events := admitCritical(t, settings.Defaults(), k, 550)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, largeGuaranteed.Name}) {
		t.Fatalf("killed %v, want upstream's choice", got)
	}
	if n := count(events, "Preempting"); n != 2 {
		t.Errorf("%d Preempting events, want 2", n)
	}
	if got, ok := store.Find(clusterCritPod.UID); !ok || len(got.Victims) != 1 {
		t.Errorf("the record was touched with the setting off: %+v, %v", got, ok)
	}
}

// Signalled victims that no longer cover the shortfall (one has left) are
// among the fresh choice where it needs them: the one still here is
// resumed, and the rest of the choice killed as ever.
func TestResumeTakesTheSignalledVictimsAFreshChoiceNeeds(t *testing.T) {
	store, _ := installStore(t)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: time.Now(),
		Victims: []checkpoint.Victim{
			{UID: smallBurstable.UID, GracePeriodSeconds: 10, KillStarted: time.Now()},
			{UID: "uid-gone", GracePeriodSeconds: 10, KillStarted: time.Now()},
		}}); err != nil {
		t.Fatal(err)
	}
	k := &recordingKill{}
	events := admitCritical(t, resuming(), k, 350)
	got := k.names()
	if !slices.Contains(got, smallBurstable.Name) || len(got) < 2 {
		t.Fatalf("killed %v, want the recorded small-burstable and more for the 250Mi it leaves", got)
	}
	if n := count(events, "Preempting"); n != len(got)-1 {
		t.Errorf("%d Preempting events for %d victims, one resumed", n, len(got))
	}
}

// With outage recovery, a kill whose wait ended while the pod workers were
// retrying it (the runtime was unreachable) is waited for again; without,
// the first wait's verdict stands.
func TestOutageRecoveryWaitsOnForARetriedKill(t *testing.T) {
	for _, on := range []bool{false, true} {
		opts := settings.Upstream()
		opts = opts.With(patched.OutageRecovery, on)
		pods := []*v1.Pod{largeBurstable}
		calls := 0
		kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
			calls++
			if calls == 1 {
				// The pod workers retried the kill meanwhile.
				kubeletstate.Get().KillRetries.Failed(pod.UID, time.Now())
				return errors.New("timeout waiting to kill pod")
			}
			return nil
		}
		rec := record.NewFakeRecorder(20)
		h := newHandler(func() []*v1.Pod { return pods }, kill, rec, opts)
		_, ctx := ktesting.NewTestContext(t)
		if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(300), lifecycle.AddOperation); err != nil {
			t.Fatal(err)
		}
		events := drainEvents(rec)
		if want := map[bool]int{false: 1, true: 2}[on]; calls != want {
			t.Errorf("outage recovery %v: %d waits, want %d", on, calls, want)
		}
		// Admitted in full only when the second wait saw the victim go.
		if want := map[bool]int{false: 1, true: 0}[on]; count(events, reasonPreemptionIncomplete) != want {
			t.Errorf("outage recovery %v: events %q", on, events)
		}
	}
}

// A record whose victims have all left is no preemption to resume: the
// victims are chosen afresh, each with its event.
func TestResumeWithEveryRecordedVictimGone(t *testing.T) {
	store, _ := installStore(t)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: time.Now(),
		Victims: []checkpoint.Victim{{UID: "uid-gone", GracePeriodSeconds: 10, KillStarted: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	k := &recordingKill{}
	events := admitCritical(t, resuming(), k, 550)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, largeGuaranteed.Name}) {
		t.Fatalf("killed %v, want upstream's choice", got)
	}
	for _, c := range k.calls {
		if c.override != nil {
			t.Errorf("%s killed with override %d, want its own grace", c.pod, *c.override)
		}
	}
	if n := count(events, "Preempting"); n != 2 {
		t.Errorf("%d Preempting events, want 2", n)
	}
	if _, ok := store.Find(clusterCritPod.UID); ok {
		t.Error("the record outlived the admission")
	}
}

// A record that cannot be written costs only the resumption: the victims
// are killed as without the setting, and the failure is logged.
func TestResumeGoesOnWhenTheRecordCannotBeWritten(t *testing.T) {
	_, root := installStore(t)
	dir := filepath.Join(root, checkpoint.Dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // a file where the directory was
		t.Fatal(err)
	}
	k := &recordingKill{}
	h := newHandler(func() []*v1.Pod { return resumeCast }, k.kill, record.NewFakeRecorder(20), resuming())
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	if _, err := h.HandleAdmissionFailure(klog.NewContext(t.Context(), logger), clusterCritPod, memoryShortfall(550), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, largeGuaranteed.Name}) {
		t.Fatalf("killed %v, want upstream's choice", got)
	}
	var logged bool
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		logged = logged || strings.Contains(e.Message, "Could not record the preemption's victims")
	}
	if !logged {
		t.Error("the failed write was not logged")
	}
}

// A kubelet stopped by SIGTERM (its context cancelled) while victims are
// still terminating keeps the record: the next kubelet goes on with the
// same preemption rather than starting afresh.
func TestResumeRecordOutlivesAShutdown(t *testing.T) {
	store, _ := installStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	k := &recordingKill{}
	k.also = func(pod *v1.Pod) error {
		cancel() // the kubelet is told to stop while the victims terminate
		<-ctx.Done()
		return errors.New("the pod workers stopped")
	}
	rec := record.NewFakeRecorder(20)
	h := newHandler(func() []*v1.Pod { return resumeCast }, k.kill, rec, resuming())
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(550), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	p, ok := store.Find(clusterCritPod.UID)
	if !ok {
		t.Fatal("the record of an unfinished preemption was dropped at shutdown")
	}
	for _, v := range p.Victims {
		if v.KillStarted.IsZero() {
			t.Errorf("victim %s recorded without its kill's start", v.Name)
		}
	}
	if len(p.Victims) != 2 {
		t.Errorf("recorded %d victims, want 2", len(p.Victims))
	}
}

// Recorded victims never signalled are no promise: the shortfall is chosen
// for as a fresh preemption would choose it. Here 50Mi: the small
// Burstable pod, not the two large pods the earlier kubelet recorded.
func TestResumeKillsNoMoreThanNeeded(t *testing.T) {
	store, _ := installStore(t)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: time.Now(),
		Victims: []checkpoint.Victim{
			{UID: largeBurstable.UID, Name: largeBurstable.Name, GracePeriodSeconds: 10},
			{UID: largeGuaranteed.UID, Name: largeGuaranteed.Name, GracePeriodSeconds: 10},
		}}); err != nil {
		t.Fatal(err)
	}
	fresh := &recordingKill{}
	admitCritical(t, settings.Defaults(), fresh, 50)
	k := &recordingKill{}
	admitCritical(t, resuming(), k, 50)
	if got, want := k.names(), fresh.names(); !slices.Equal(got, want) || !slices.Equal(want, []string{smallBurstable.Name}) {
		t.Fatalf("killed %v, want what a fresh preemption kills (%v), the small Burstable pod", got, want)
	}
	// A signalled victim that covers the shortfall alone is the only one.
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: time.Now(),
		Victims: []checkpoint.Victim{
			{UID: largeBurstable.UID, Name: largeBurstable.Name, GracePeriodSeconds: 10, KillStarted: time.Now()},
			{UID: largeGuaranteed.UID, Name: largeGuaranteed.Name, GracePeriodSeconds: 10},
		}}); err != nil {
		t.Fatal(err)
	}
	k = &recordingKill{}
	admitCritical(t, resuming(), k, 250)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name}) {
		t.Fatalf("killed %v, want only the signalled large Burstable pod, which covers 250Mi", got)
	}
}

// Signalled victims a fresh choice does not take are spared: here both
// recorded pods were signalled, yet 50Mi is the small Burstable pod's to
// free, and it is the only pod killed, with its event.
func TestResumeSparesSignalledVictimsAFreshChoiceDoesNotTake(t *testing.T) {
	store, _ := installStore(t)
	began := time.Now().Add(-2 * time.Second)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: began,
		Victims: []checkpoint.Victim{
			{UID: largeBurstable.UID, Name: largeBurstable.Name, GracePeriodSeconds: 10, KillStarted: began},
			{UID: largeGuaranteed.UID, Name: largeGuaranteed.Name, GracePeriodSeconds: 10, KillStarted: began},
		}}); err != nil {
		t.Fatal(err)
	}
	k := &recordingKill{}
	events := admitCritical(t, resuming(), k, 50)
	if got := k.names(); !slices.Equal(got, []string{smallBurstable.Name}) {
		t.Fatalf("killed %v, want the fresh choice alone: [%s]", got, smallBurstable.Name)
	}
	if k.calls[0].override != nil {
		t.Errorf("the fresh victim was killed with override %d, want its own grace", *k.calls[0].override)
	}
	if n := count(events, "Preempting"); n != 1 {
		t.Errorf("%d Preempting events, want 1: %q", n, events)
	}
	if _, ok := store.Find(clusterCritPod.UID); ok {
		t.Error("the finished preemption is still recorded")
	}
}

// Where pods are alike, the fresh choice is the earlier kubelet's: of two
// identical Burstable pods the stock rule takes the later in the list,
// but the earlier one was signalled, so it is the victim, with the grace
// it has left and no second event.
func TestResumePrefersTheSignalledAmongIdenticalPods(t *testing.T) {
	store, _ := installStore(t)
	twin := castPod("small-burstable-twin", "100m", "100Mi", false, nil)
	pods := []*v1.Pod{smallBurstable, twin}
	began := time.Now().Add(-2 * time.Second)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: began,
		Victims: []checkpoint.Victim{{UID: smallBurstable.UID, Name: smallBurstable.Name, GracePeriodSeconds: 10, KillStarted: began}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts settings.Settings
		want string
	}{{settings.Defaults(), twin.Name}, {resuming(), smallBurstable.Name}} {
		k := &recordingKill{}
		rec := record.NewFakeRecorder(20)
		h := newHandler(func() []*v1.Pod { return pods }, k.kill, rec, c.opts)
		_, ctx := ktesting.NewTestContext(t)
		if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(50), lifecycle.AddOperation); err != nil {
			t.Fatal(err)
		}
		if got := k.names(); !slices.Equal(got, []string{c.want}) {
			t.Errorf("resume %v: killed %v, want [%s]", c.opts.On(patched.PreemptionResume), got, c.want)
		}
		if c.opts.On(patched.PreemptionResume) && (k.calls[0].override == nil || count(drainEvents(rec), "Preempting") != 0) {
			t.Errorf("the signalled victim was not killed with the grace it has left and no second event")
		}
	}
}

// A signalled victim the first round spares is still resumed if a
// re-planned round takes it: the first round's victim fails to stop, and
// the signalled pod it leaves is killed with the grace it has left and no
// second event.
func TestResumeReplanKeepsASparedVictimsGrace(t *testing.T) {
	store, _ := installStore(t)
	began := time.Now().Add(-2 * time.Second)
	if err := store.Record(checkpoint.Preemption{PodUID: clusterCritPod.UID, Started: began,
		Victims: []checkpoint.Victim{{UID: largeBurstable.UID, Name: largeBurstable.Name, GracePeriodSeconds: 10, KillStarted: began}}}); err != nil {
		t.Fatal(err)
	}
	k := &recordingKill{also: func(pod *v1.Pod) error {
		if pod.UID == smallBurstable.UID {
			return errors.New("did not stop")
		}
		return nil
	}}
	opts := resuming()
	opts.MaxReplans = 1
	events := admitCritical(t, opts, k, 50)
	if got := k.names(); !slices.Equal(got, []string{largeBurstable.Name, smallBurstable.Name}) {
		t.Fatalf("killed %v, want small-burstable first, then the signalled large-burstable re-planned", got)
	}
	for _, c := range k.calls {
		if c.pod == largeBurstable.Name && (c.override == nil || *c.override > 8) {
			t.Errorf("the signalled victim re-planned was killed with override %v, want the 8s it has left at most", c.override)
		}
	}
	if n := count(events, "Preempting"); n != 1 {
		t.Errorf("%d Preempting events, want 1 (small-burstable's): %q", n, events)
	}
}
