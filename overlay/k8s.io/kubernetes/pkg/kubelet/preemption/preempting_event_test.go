package preemption

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/kubeletstate"
)

var testSource = v1.EventSource{Component: "kubelet", Host: "node-1"}

// eventStore keeps events by name as the API server does: a second event
// of a name already kept is AlreadyExists. Each create is first answered
// by the next of fail, while any is left.
type eventStore struct {
	mu     sync.Mutex
	events map[string]*v1.Event
	fail   []error
	calls  int
}

func (s *eventStore) create(_ context.Context, ev *v1.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return err
	}
	if s.events[ev.Name] != nil {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, ev.Name)
	}
	s.events[ev.Name] = ev
	return nil
}

// on returns the events kept about the pod uid.
func (s *eventStore) on(uid types.UID) []*v1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1.Event
	for _, ev := range s.events {
		if ev.InvolvedObject.UID == uid {
			out = append(out, ev)
		}
	}
	return out
}

// installEventStore publishes a sink into a new eventStore for the test.
func installEventStore(t *testing.T) *eventStore {
	s := &eventStore{events: map[string]*v1.Event{}}
	kubeletstate.SetEvents(&kubeletstate.EventSink{Create: s.create, Source: testSource})
	t.Cleanup(func() { kubeletstate.SetEvents(nil) })
	return s
}

// A kubelet restarted mid-preemption resumes a signalled victim's kill and
// sends its Preempting event under the name the earlier kubelet gave it:
// the API server keeps one, whether the earlier kubelet had sent it or
// died first. The victim never signalled gets its own. Nothing goes
// through the recorder, whose names differ from kubelet to kubelet.
func TestResumedVictimHasOnePreemptingEvent(t *testing.T) {
	for _, sent := range []bool{true, false} {
		t.Run(map[bool]string{true: "sent before the restart", false: "lost with the earlier kubelet"}[sent], func(t *testing.T) {
			store, _ := installStore(t)
			began := time.Now().Add(-4 * time.Second)
			recordSignalled(t, store, began)
			events := installEventStore(t)
			if sent {
				ev, err := preemptingEvent(largeBurstable, testSource, began)
				if err != nil {
					t.Fatal(err)
				}
				events.events[ev.Name] = ev
			}
			rec := record.NewFakeRecorder(20)
			h := newHandler(func() []*v1.Pod { return resumeCast }, (&recordingKill{}).kill, rec, resuming())
			_, ctx := ktesting.NewTestContext(t)
			if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(550), lifecycle.AddOperation); err != nil {
				t.Fatal(err)
			}
			h.sending.Wait()
			if got := drainEvents(rec); count(got, "Preempting") != 0 {
				t.Errorf("recorder events %q, want no Preempting event: they go through the sink", got)
			}
			want, _ := preemptingEvent(largeBurstable, testSource, began)
			if got := events.on(largeBurstable.UID); len(got) != 1 || got[0].Name != want.Name {
				t.Errorf("signalled victim's events %v, want one, %s", eventNames(got), want.Name)
			}
			if got := events.on(largeGuaranteed.UID); len(got) != 1 {
				t.Errorf("the victim never signalled has events %v, want one", eventNames(got))
			}
		})
	}
}

// The name a kubelet sends a victim's event under is made from the kill's
// start as the record on disk keeps it: what a kubelet resuming the kill
// reads.
func TestPreemptingEventNamedAfterTheRecordedKill(t *testing.T) {
	store, _ := installStore(t)
	events := installEventStore(t)
	k := &recordingKill{}
	var recorded []time.Time
	k.also = func(pod *v1.Pod) error {
		p, ok := store.Find(clusterCritPod.UID)
		if !ok {
			t.Fatal("no record while killing")
		}
		for _, v := range p.Victims {
			if v.UID == pod.UID {
				recorded = append(recorded, v.KillStarted)
			}
		}
		return nil
	}
	rec := record.NewFakeRecorder(20)
	h := newHandler(func() []*v1.Pod { return resumeCast }, k.kill, rec, resuming())
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(50), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	h.sending.Wait()
	if len(recorded) != 1 || len(k.calls) != 1 {
		t.Fatalf("killed %v, recorded %v; want one victim", k.names(), recorded)
	}
	victim := podNamed(t, k.calls[0].pod)
	want, _ := preemptingEvent(victim, testSource, recorded[0])
	if got := events.on(victim.UID); len(got) != 1 || got[0].Name != want.Name {
		t.Errorf("victim's events %v, want %s, named after the kill's start on disk", eventNames(got), want.Name)
	}
}

// Without the sink (a standalone kubelet, or the setting off) the recorder
// sends the event, as upstream's handler does.
func TestPreemptingEventThroughTheRecorderWithoutASink(t *testing.T) {
	installStore(t)
	rec := record.NewFakeRecorder(20)
	h := newHandler(func() []*v1.Pod { return resumeCast }, (&recordingKill{}).kill, rec, resuming())
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.HandleAdmissionFailure(ctx, clusterCritPod, memoryShortfall(50), lifecycle.AddOperation); err != nil {
		t.Fatal(err)
	}
	if n := count(drainEvents(rec), "Preempting"); n != 1 {
		t.Errorf("%d recorder Preempting events, want 1", n)
	}
}

// The event is the recorder's in all but its name and time: the same
// object reference, reason, message, type, count and source, compared
// with an event client-go's recorder makes.
func TestPreemptingEventIsTheRecorders(t *testing.T) {
	b := record.NewBroadcaster()
	defer b.Shutdown()
	made := make(chan *v1.Event, 1)
	b.StartEventWatcher(func(ev *v1.Event) { made <- ev })
	b.NewRecorder(scheme.Scheme, testSource).Eventf(largeBurstable, v1.EventTypeWarning, "Preempting", victimMessage)
	var want *v1.Event
	select {
	case want = <-made:
	case <-time.After(time.Minute):
		t.Fatal("the recorder made no event")
	}
	at := time.Unix(1_700_000_000, 123456789)
	got, err := preemptingEvent(largeBurstable, testSource, at)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != largeBurstable.Name+".17979cfe3d85cd15" || !got.FirstTimestamp.Time.Equal(at) || !got.LastTimestamp.Time.Equal(at) {
		t.Errorf("name %s, times %v %v; want the recorder's name scheme for %v", got.Name, got.FirstTimestamp, got.LastTimestamp, at)
	}
	got.Name, got.FirstTimestamp, got.LastTimestamp = want.Name, want.FirstTimestamp, want.LastTimestamp
	got.EventTime = want.EventTime
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("event %+v\ndiffers from the recorder's %+v", got, want)
	}
}

// A failure the API server may not repeat is retried; one it would
// (forbidden) is not.
func TestPreemptingEventRetried(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("restarting")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "e", errors.New("no"))
	for _, tc := range []struct {
		name  string
		fail  []error
		calls int
		kept  int
	}{
		{"created", nil, 1, 1},
		{"after two failures", []error{unavailable, errors.New("connection refused")}, 3, 1},
		{"forbidden", []error{forbidden}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &eventStore{events: map[string]*v1.Event{}, fail: tc.fail}
			ev, _ := preemptingEvent(largeBurstable, testSource, time.Now())
			_ = sendUntilAnswered(context.Background(), s.create, ev)
			if s.calls != tc.calls || len(s.events) != tc.kept {
				t.Errorf("%d creates, %d kept; want %d, %d", s.calls, len(s.events), tc.calls, tc.kept)
			}
		})
	}
}

func eventNames(evs []*v1.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Name)
	}
	return out
}

func podNamed(t *testing.T, name string) *v1.Pod {
	t.Helper()
	for _, p := range resumeCast {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %s", name)
	return nil
}

// A pod whose name is too long for the recorder's event name (which then
// takes a random one) gets a name made from its UID: the same for every
// kubelet, and valid.
func TestPreemptingEventNameForALongPodName(t *testing.T) {
	long := largeBurstable.DeepCopy()
	long.Name = strings.Repeat("p", 250)
	at := time.Now()
	a, errA := preemptingEvent(long, testSource, at)
	b, errB := preemptingEvent(long, testSource, at)
	if errA != nil || errB != nil || a.Name != b.Name || a.Name != fmt.Sprintf("%s.%x", long.UID, at.UnixNano()) {
		t.Fatalf("names %q, %q (%v, %v); want one made from the UID", a.Name, b.Name, errA, errB)
	}
	if errs := validation.IsDNS1123Subdomain(a.Name); len(errs) != 0 {
		t.Errorf("name %q: %v", a.Name, errs)
	}
}
