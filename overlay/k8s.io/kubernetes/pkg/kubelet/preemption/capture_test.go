package preemption

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// logCapture is a logr sink that keeps every entry, at every verbosity, as
// one line: "info V<level> <message> <key>=<value> ..." or
// "error <message> err=<error> <key>=<value> ...". Safe for concurrent use.
type logCapture struct {
	mu      sync.Mutex
	entries []string
}

func (c *logCapture) logger() logr.Logger { return logr.New(&captureSink{c: c}) }

func (c *logCapture) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.entries...)
}

type captureSink struct {
	c      *logCapture
	values []any
}

func (s *captureSink) Init(logr.RuntimeInfo)  {}
func (s *captureSink) Enabled(level int) bool { return true }
func (s *captureSink) Info(level int, msg string, kv ...any) {
	s.add(fmt.Sprintf("info V%d %s", level, msg), kv)
}
func (s *captureSink) Error(err error, msg string, kv ...any) {
	s.add(fmt.Sprintf("error %s err=%v", msg, err), kv)
}
func (s *captureSink) WithValues(kv ...any) logr.LogSink {
	return &captureSink{c: s.c, values: append(append([]any(nil), s.values...), kv...)}
}
func (s *captureSink) WithName(string) logr.LogSink { return s }

func (s *captureSink) add(head string, kv []any) {
	var b strings.Builder
	b.WriteString(head)
	all := append(append([]any(nil), s.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%v", all[i], all[i+1])
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.entries = append(s.c.entries, b.String())
}

// eventCapture is an EventRecorder that keeps each event with the object it
// is about. Safe for concurrent use.
type eventCapture struct {
	mu     sync.Mutex
	events []capturedEvent
}

// capturedEvent is one event: object is "<namespace>/<name>", text
// "<type> <reason> <namespace>/<name> <message>".
type capturedEvent struct{ object, text string }

func (e *eventCapture) Event(object runtime.Object, eventtype, reason, message string) {
	name := "?"
	if m, err := meta.Accessor(object); err == nil {
		name = m.GetNamespace() + "/" + m.GetName()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, capturedEvent{name, fmt.Sprintf("%s %s %s %s", eventtype, reason, name, message)})
}

func (e *eventCapture) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	e.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (e *eventCapture) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	e.Eventf(object, eventtype, reason, messageFmt, args...)
}

func (e *eventCapture) list() []capturedEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]capturedEvent(nil), e.events...)
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
