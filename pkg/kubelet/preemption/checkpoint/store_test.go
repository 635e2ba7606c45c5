package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func open(t *testing.T, root string, now time.Time) (*Store, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	s, err := Open(logger, root, func() time.Time { return now })
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if u, ok := logger.GetSink().(ktesting.Underlier); ok {
		for _, e := range u.GetBuffer().Data() {
			logs.WriteString(e.Message + " " + strings.TrimSpace(klogArgs(e)) + "\n")
		}
	}
	return s, &logs
}

func klogArgs(e ktesting.LogEntry) string {
	var b strings.Builder
	for _, kv := range e.WithKVList {
		b.WriteString(" ")
		b.WriteString(toString(kv))
	}
	for _, kv := range e.ParameterKVList {
		b.WriteString(" ")
		b.WriteString(toString(kv))
	}
	if e.Err != nil {
		b.WriteString(" " + e.Err.Error())
	}
	return b.String()
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestStoreSurvivesARestart(t *testing.T) {
	root := t.TempDir()
	s, _ := open(t, root, t0)
	p := Preemption{PodUID: "crit", Namespace: "kube-system", Name: "critical", Started: t0,
		Victims: []Victim{{UID: "a", Namespace: "e2e", Name: "a", GracePeriodSeconds: 10}}}
	if err := s.Record(p); err != nil {
		t.Fatal(err)
	}
	if err := s.Started("crit", "a", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(root, Dir))
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint directory: %v, %v; want mode 0700", info, err)
	}
	// A new kubelet reads what the old one wrote.
	again, _ := open(t, root, t0.Add(2*time.Second))
	got, ok := again.Find("crit")
	if !ok || len(got.Victims) != 1 || !got.Victims[0].KillStarted.Equal(t0.Add(time.Second)) || got.Name != "critical" {
		t.Fatalf("after a restart: %+v, %v", got, ok)
	}
	if err := again.Finish("crit"); err != nil {
		t.Fatal(err)
	}
	third, _ := open(t, root, t0.Add(3*time.Second))
	if _, ok := third.Find("crit"); ok {
		t.Fatal("a finished preemption was read back")
	}
}

// A file this kubelet cannot trust is ignored, said so, and replaced by the
// next write; nothing in it is resumed.
func TestStoreIgnoresWhatItCannotTrust(t *testing.T) {
	good := func(t *testing.T) []byte {
		root := t.TempDir()
		s, _ := open(t, root, t0)
		if err := s.Record(Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10}}}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(root, Dir, Key))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := []struct {
		name   string
		mangle func([]byte) []byte
		want   string
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, "not a checkpoint"},
		{"a victim's UID changed", func(b []byte) []byte { return bytes.Replace(b, []byte(`"uid":"a"`), []byte(`"uid":"b"`), 1) }, "checksum mismatch"},
		{"a later version", func(b []byte) []byte { return bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1) }, "version 2"},
		{"another kind", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`critlet-preemptions`), []byte(`device-plugins`), 1)
		}, "kind"},
		{"empty", func([]byte) []byte { return nil }, "not a checkpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.mangle(good(t))
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, Dir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, Dir, Key), data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, logs := open(t, root, t0)
			if _, ok := s.Find("crit"); ok {
				t.Fatal("a preemption was read from a file that cannot be trusted")
			}
			if !strings.Contains(logs.String(), "Ignoring the preemption checkpoint") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log %q, want the file ignored with %q", logs.String(), tc.want)
			}
			if err := s.Record(Preemption{PodUID: "next", Started: t0}); err != nil {
				t.Fatal(err)
			}
			if again, _ := open(t, root, t0); !func() bool { _, ok := again.Find("next"); return ok }() {
				t.Error("the next write did not replace the untrusted file")
			}
		})
	}
}

// Fields this version does not know, written by a later kubelet of the same
// format version, are ignored; what it knows is read.
func TestStoreReadsALaterWritersExtraFields(t *testing.T) {
	state := []byte(`[{"podUID":"crit","namespace":"kube-system","name":"critical","started":"2026-12-05T01:00:00Z","victims":[{"uid":"a","namespace":"e2e","name":"a","gracePeriodSeconds":10,"killStarted":"2026-12-05T01:00:01Z","signal":"SIGTERM"}],"note":"later"}]`)
	doc, err := json.Marshal(file{Kind: kind, Version: Version, State: state, Checksum: crc32Of(state)})
	if err != nil {
		t.Fatal(err)
	}
	doc = bytes.Replace(doc, []byte(`{"kind"`), []byte(`{"writer":"critlet v9","kind"`), 1)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, Dir, Key), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	s, logs := open(t, root, t0.Add(2*time.Second))
	got, ok := s.Find("crit")
	if !ok || got.Victims[0].GracePeriodSeconds != 10 || !got.Victims[0].KillStarted.Equal(t0.Add(time.Second)) {
		t.Fatalf("read %+v, %v; log %q", got, ok, logs)
	}
}

func TestStoreDropsStaleOnOpen(t *testing.T) {
	root := t.TempDir()
	s, _ := open(t, root, t0)
	if err := s.Record(Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10}}}); err != nil {
		t.Fatal(err)
	}
	later, logs := open(t, root, t0.Add(time.Hour))
	if _, ok := later.Find("crit"); ok {
		t.Fatal("an hour-old preemption was kept")
	}
	if !strings.Contains(logs.String(), "stale 1") {
		t.Errorf("log %q, want the stale record counted", logs)
	}
}

func TestOpenFailsWhereItCannotWrite(t *testing.T) {
	root := t.TempDir()
	// The directory's name is taken by a file.
	if err := os.WriteFile(filepath.Join(root, Dir), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(klog.Background(), root, time.Now); err == nil || !strings.Contains(err.Error(), "checkpoint directory") {
		t.Fatalf("Open over a file: %v, want an error naming the checkpoint directory", err)
	}
}
