package preemption

// A victim's Preempting event when its preemption is recorded for
// resumption (--critical-preemption-resume). The recorder names an event
// after the moment it makes it and sends it in the background, so a
// kubelet killed right after a kill began may never have sent it, and a
// kubelet resuming the kill cannot tell (a node may not list events).
// Instead the handler sends the event itself, the recorder's in all but
// its name, which is made from when the victim's kill began as the record
// keeps it: every kubelet that carries on the preemption sends the same
// event, and the API server keeps the first (AlreadyExists for the
// others). One event per victim, never none and never two.

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/events"

	"github.com/critlet/critlet/pkg/kubeletstate"
)

// eventSendWait bounds how long an event is sent for: about as long as
// the recorder tries (12 tries 10 s apart).
const eventSendWait = 2 * time.Minute

// recordPreempting records pod's Preempting event as its kill starts: the
// recorder's, or, when the kill is recorded for resumption and the kubelet
// has an API client, the event named after when the kill began. For a
// kill resumed from an earlier kubelet only the latter is sent: the
// recorder's would be a second event.
func (a *admission) recordPreempting(pod *v1.Pod, resumed bool) {
	if at, ok := a.killStarted(pod.UID); ok {
		if sink := kubeletstate.Get().Events; sink != nil {
			if ev, err := preemptingEvent(pod, sink.Source, at); err == nil {
				a.send(sink, ev)
				return
			}
		}
	}
	if !resumed {
		a.handler.recorder.Eventf(pod, v1.EventTypeWarning, events.PreemptContainer, victimMessage)
	}
}

// killStarted returns when the record says uid's kill began.
func (a *admission) killStarted(uid types.UID) (time.Time, bool) {
	for _, v := range a.record.Victims {
		if v.UID == uid && !v.KillStarted.IsZero() {
			return v.KillStarted, true
		}
	}
	return time.Time{}, false
}

// preemptingEvent is the Preempting event the kubelet's recorder would
// make for victim at time at, from source.
func preemptingEvent(victim *v1.Pod, source v1.EventSource, at time.Time) (*v1.Event, error) {
	ref, err := reference.GetReference(scheme.Scheme, victim)
	if err != nil {
		return nil, err
	}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	// The recorder's name, unless the pod's name is too long for it: the
	// recorder then takes a random one, which a resumed kill could not
	// give again; the pod's UID stands in for its name.
	name := util.GenerateEventName(ref.Name, at.UnixNano())
	if name != fmt.Sprintf("%v.%x", ref.Name, at.UnixNano()) {
		name = fmt.Sprintf("%v.%x", ref.UID, at.UnixNano())
	}
	t := metav1.NewTime(at)
	return &v1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: namespace},
		InvolvedObject:      *ref,
		Reason:              events.PreemptContainer,
		Message:             victimMessage,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                v1.EventTypeWarning,
		Source:              source,
		ReportingController: source.Component,
		ReportingInstance:   source.Host,
	}, nil
}

// send sends ev through sink off the admission path, for at most the
// handler's eventWait.
func (a *admission) send(sink *kubeletstate.EventSink, ev *v1.Event) {
	c, logger := a.handler, a.logger
	// As the kubelet's event broadcaster logs each event it is given.
	logger.V(3).Info("Event occurred", "object", klog.KRef(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name), "fieldPath", ev.InvolvedObject.FieldPath,
		"kind", ev.InvolvedObject.Kind, "apiVersion", ev.InvolvedObject.APIVersion, "type", ev.Type, "reason", ev.Reason, "message", ev.Message)
	c.sending.Add(1)
	go func() {
		defer c.sending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.eventWait)
		defer cancel()
		err := sendUntilAnswered(ctx, sink.Create, ev)
		switch {
		case err == nil:
		case apierrors.IsAlreadyExists(err):
			// Sent by an earlier kubelet, or by this one in a try whose
			// answer was lost.
			logger.V(2).Info("A victim's Preempting event was in the API server already", "pod", klog.KRef(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name), "event", ev.Name)
		default:
			logger.Error(err, "Unable to record a victim's Preempting event", "pod", klog.KRef(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name), "event", ev.Name)
		}
	}()
}

// sendUntilAnswered creates ev until the API server answers for good
// (created, or an error a retry would meet again) or ctx is done, backing
// off from 250ms to 10s; it returns the last error.
func sendUntilAnswered(ctx context.Context, create func(context.Context, *v1.Event) error, ev *v1.Event) error {
	delay := 250 * time.Millisecond
	for {
		err := create(ctx, ev.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) ||
			apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}
