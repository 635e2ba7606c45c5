// Package kubeletstate holds what critlet's patches share within one
// kubelet process, and nothing else.
//
// The patches sit in different upstream packages (pkg/kubelet, pkg/kubelet/cm,
// pkg/kubelet/preemption) that upstream's NewMainKubelet wires with fixed
// signatures, so they cannot hand each other these as arguments. Each
// value is published here by the one place that makes it and read by the
// others through Get, the only way to read them:
//
//   - Settings: by the kubelet main, before NewMainKubelet runs (and by the
//     patches' tests in upstream's package, from the environment).
//   - Checkpoints: by the preemption-resume patch inside NewMainKubelet,
//     before the admission handler is built; nil when the patch is off or
//     the record could not be opened.
//   - KillRetries: made with the process; the pod workers' hook records
//     retries in it, the admission handler reads their count.
//   - Events: by the preemption-resume patch with Checkpoints, when the
//     kubelet has an API client; nil otherwise.
//   - Held: by the kubelet package when it loads (the pods device
//     re-admission and device preemption hold, unadmitted); the admission
//     handler passes over them.
package kubeletstate

import (
	"context"
	"fmt"
	"os"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/critlet/critlet/pkg/checkpoint"
	"github.com/critlet/critlet/pkg/killretry"
	"github.com/critlet/critlet/pkg/settings"
)

// State is a snapshot of what the patches share.
type State struct {
	Settings    settings.Settings
	Checkpoints *checkpoint.Store
	KillRetries *killretry.Tracker
	// Events creates events in the API server as the kubelet's recorder
	// sends them, for a patch that must know one was delivered.
	Events *EventSink
	// Held reports a pod the kubelet holds unadmitted: in its pod manager
	// and active, but with nothing allocated, nothing running.
	Held func(types.UID) bool
}

var (
	mu    sync.Mutex
	state = State{Settings: settings.Defaults(), KillRetries: killretry.NewTracker(), Held: func(types.UID) bool { return false }}
)

// Get returns what is published now.
func Get() State {
	mu.Lock()
	defer mu.Unlock()
	return state
}

// SetSettings publishes the kubelet's settings.
func SetSettings(s settings.Settings) {
	mu.Lock()
	defer mu.Unlock()
	state.Settings = s
}

// SetCheckpoints publishes the preemption record's store (nil for none).
func SetCheckpoints(s *checkpoint.Store) {
	mu.Lock()
	defer mu.Unlock()
	state.Checkpoints = s
}

// EventSink creates events as the kubelet's recorder does: Create sends
// one (its errors the API server's), Source is the recorder's source.
type EventSink struct {
	Create func(ctx context.Context, event *v1.Event) error
	Source v1.EventSource
}

// SetEvents publishes the kubelet's event sink.
func SetEvents(sink *EventSink) {
	mu.Lock()
	defer mu.Unlock()
	state.Events = sink
}

// SetHeld publishes the kubelet's test of a held pod.
func SetHeld(held func(types.UID) bool) {
	mu.Lock()
	defer mu.Unlock()
	state.Held = held
}

// SetSettingsFromEnvironment publishes the settings the CRITLET_*
// variables give, as the kubelet main would from its flags: the patches'
// tests in upstream's package use it, so that upstream's own tests there
// run with the patches on or off (hack/test-patched-kubelet.sh).
func SetSettingsFromEnvironment() error {
	s, _, err := settings.FromArgs(nil, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("critlet's settings from the environment: %w", err)
	}
	SetSettings(s)
	return nil
}
