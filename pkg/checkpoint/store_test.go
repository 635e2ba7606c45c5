package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func open(t *testing.T, root string, now time.Time) (*Store, *bytes.Buffer) {
	t.Helper()
	s, logs := openClock(t, root, func() time.Time { return now })
	var b bytes.Buffer
	b.WriteString(logs())
	return s, &b
}

// openClock opens the store under root with the clock given; logs renders
// what it has logged so far, Open's lines and later ones.
func openClock(t *testing.T, root string, now func() time.Time) (s *Store, logs func() string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	s, err := Open(logger, root, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, func() string {
		var b strings.Builder
		if u, ok := logger.GetSink().(ktesting.Underlier); ok {
			for _, e := range u.GetBuffer().Data() {
				b.WriteString(e.Message + " " + strings.TrimSpace(klogArgs(e)) + "\n")
			}
		}
		return b.String()
	}
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
		Victims: []Victim{{UID: "a", Namespace: "e2e", Name: "a", GracePeriodSeconds: 10, KillStarted: t0.Add(time.Second)}}}
	if err := s.Record(p); err != nil {
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

// plant writes, as a checkpoint, state (JSON) with a valid kind, version
// and checksum, so that only what is checked beyond them can refuse it.
func plant(t *testing.T, root string, state []byte) {
	t.Helper()
	doc, err := json.Marshal(file{Kind: kind, Version: Version, State: state, Checksum: crc32Of(state)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, Dir, Key), doc, 0o600); err != nil {
		t.Fatal(err)
	}
}

func stateJSON(t *testing.T, s State) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A record found past its stale time is not returned, though it was fresh
// when the store was opened.
func TestStoreFindRechecksStaleness(t *testing.T) {
	now := t0
	s, _ := openClock(t, t.TempDir(), func() time.Time { return now })
	if err := s.Record(Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10, KillStarted: t0}}}); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(10*time.Second + staleAfter)
	if _, ok := s.Find("crit"); !ok {
		t.Fatal("not found at its stale time")
	}
	now = now.Add(time.Second)
	if p, ok := s.Find("crit"); ok {
		t.Errorf("found %+v past its stale time", p)
	}
}

// A record whose kill began later than now (the clock was stepped back
// since) is not returned: its times say nothing of the grace left.
func TestStoreFindRefusesTimesAheadOfTheClock(t *testing.T) {
	now := t0
	s, logs := openClock(t, t.TempDir(), func() time.Time { return now })
	if err := s.Record(Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 30, KillStarted: t0}}}); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(-time.Hour)
	if p, ok := s.Find("crit"); ok {
		t.Errorf("found %+v with a clock an hour behind its kill", p)
	}
	if !strings.Contains(logs(), "Not resuming the recorded preemption") {
		t.Errorf("log %q, want the refusal said", logs())
	}
}

// Records with times no kubelet writes are dropped at reading, each said
// so; the others are read.
func TestStoreDropsRecordsWithImpossibleTimes(t *testing.T) {
	now := t0.Add(time.Minute)
	kill := func(grace int64, at time.Time) []Victim {
		return []Victim{{UID: "v", GracePeriodSeconds: grace, KillStarted: at}}
	}
	root := t.TempDir()
	plant(t, root, stateJSON(t, State{
		{PodUID: "good", Started: t0, Victims: kill(30, t0.Add(time.Second))},
		{PodUID: "future", Started: now.Add(time.Hour), Victims: kill(30, time.Time{})},
		{PodUID: "kill-before-start", Started: t0, Victims: kill(30, t0.Add(-time.Minute))},
		{PodUID: "kill-ahead", Started: t0, Victims: kill(30, now.Add(time.Hour))},
		{PodUID: "negative-grace", Started: t0, Victims: kill(-5, time.Time{})},
	}))
	s, logs := open(t, root, now)
	for _, uid := range []types.UID{"future", "kill-before-start", "kill-ahead", "negative-grace"} {
		if p, ok := s.Find(uid); ok {
			t.Errorf("%s: read %+v", uid, p)
		}
		if !strings.Contains(logs.String(), string(uid)) {
			t.Errorf("%s: not said to be ignored: %q", uid, logs)
		}
	}
	if _, ok := s.Find("good"); !ok {
		t.Error("the good record was not read")
	}
	if !strings.Contains(logs.String(), "underWay 1 stale 0 untrusted 4") {
		t.Errorf("log %q, want 1 read, 4 untrusted", logs)
	}
}

// A file larger than any kubelet writes, or holding more records or
// victims, is not trusted, said so, and replaced by the next write.
func TestStoreRefusesAFileBeyondTheBounds(t *testing.T) {
	victims := func(n int) []Victim {
		vs := make([]Victim, n)
		for i := range vs {
			vs[i] = Victim{UID: types.UID(fmt.Sprint("v", i)), GracePeriodSeconds: 10, KillStarted: t0}
		}
		return vs
	}
	records := func(n int) State {
		s := make(State, n)
		for i := range s {
			s[i] = Preemption{PodUID: types.UID(fmt.Sprint("p", i)), Started: t0}
		}
		return append(s, Preemption{PodUID: "crit", Started: t0, Victims: victims(1)})
	}
	crit := Preemption{PodUID: "crit", Started: t0, Victims: victims(1)}
	huge := bytes.Replace(stateJSON(t, State{crit}), []byte(`"started"`),
		[]byte(`"padding":"`+strings.Repeat("x", maxFileBytes)+`","started"`), 1)
	tests := []struct {
		name  string
		state []byte
		want  string
	}{
		{"too large", huge, "bytes"},
		{"too many records", stateJSON(t, records(maxPreemptions)), "preemptions"},
		{"too many victims", stateJSON(t, State{{PodUID: "crit", Started: t0, Victims: victims(maxVictims + 1)}}), "victims"},
		{"too many victims in all", stateJSON(t, State{
			{PodUID: "crit", Started: t0, Victims: victims(maxVictims / 2)},
			{PodUID: "other", Started: t0, Victims: victims(maxVictims/2 + 1)},
		}), "victims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			plant(t, root, tc.state)
			s, logs := open(t, root, t0.Add(time.Second))
			if _, ok := s.Find("crit"); ok {
				t.Fatal("a preemption was read from a file beyond the bounds")
			}
			if !strings.Contains(logs.String(), "Ignoring the preemption checkpoint") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log %q, want the file ignored, naming %q", logs, tc.want)
			}
			if err := s.Record(Preemption{PodUID: "next", Started: t0}); err != nil {
				t.Fatal(err)
			}
			if again, _ := open(t, root, t0.Add(time.Second)); !func() bool { _, ok := again.Find("next"); return ok }() {
				t.Error("the next write did not replace the file")
			}
		})
	}
}

// A kubelet writes nothing it would refuse to read back; the state it had
// stays.
func TestStoreWritesNothingBeyondTheBounds(t *testing.T) {
	root := t.TempDir()
	s, _ := open(t, root, t0)
	if err := s.Record(Preemption{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10}}}); err != nil {
		t.Fatal(err)
	}
	many := make([]Victim, maxVictims+1)
	for i := range many {
		many[i] = Victim{UID: types.UID(fmt.Sprint("v", i)), GracePeriodSeconds: 10}
	}
	if err := s.Record(Preemption{PodUID: "big", Started: t0, Victims: many}); err == nil || !strings.Contains(err.Error(), "victims") {
		t.Fatalf("recording %d victims: %v, want an error naming the victims", len(many), err)
	}
	if _, ok := s.Find("big"); ok {
		t.Error("the refused record is in memory")
	}
	again, _ := open(t, root, t0)
	if _, ok := again.Find("crit"); !ok {
		t.Error("the refused write lost the record before it")
	}
}

// <root>/critlet as a link (to a directory outside the root, or inside it)
// is not followed: Open fails, naming the directory, and nothing is
// written through the link, then or later.
func TestOpenRefusesALinkedDirectory(t *testing.T) {
	for _, inside := range []bool{false, true} {
		t.Run(fmt.Sprint("inside the root ", inside), func(t *testing.T) {
			root := t.TempDir()
			target := t.TempDir()
			if inside {
				target = filepath.Join(root, "pods")
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, filepath.Join(root, Dir)); err != nil {
				t.Fatal(err)
			}
			_, err := Open(klog.Background(), root, func() time.Time { return t0 })
			if err == nil || !strings.Contains(err.Error(), "checkpoint directory") || !strings.Contains(err.Error(), "not a directory") {
				t.Errorf("Open through a link: %v, want an error naming the checkpoint directory", err)
			}
			if entries, _ := os.ReadDir(target); len(entries) > 0 {
				t.Errorf("written through the link: %v", entries)
			}
		})
	}
}

// A directory replaced by a link after Open is not written through.
func TestWriteRefusesALinkedDirectory(t *testing.T) {
	root, target := t.TempDir(), t.TempDir()
	s, _ := open(t, root, t0)
	if err := os.Remove(filepath.Join(root, Dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, Dir)); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(Preemption{PodUID: "crit", Started: t0}); err == nil {
		t.Error("a write through a link succeeded")
	}
	if entries, _ := os.ReadDir(target); len(entries) > 0 {
		t.Errorf("written through the link: %v", entries)
	}
}

// A link in the file's place (or the temporary file's) is not read
// through; the next write replaces the link, leaving its target alone.
func TestStoreDoesNotFollowALinkedFile(t *testing.T) {
	elsewhere := t.TempDir()
	plant(t, elsewhere, stateJSON(t, State{{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10, KillStarted: t0}}}}))
	target := filepath.Join(elsewhere, Dir, Key)
	before, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Key, "." + Key + ".tmp"} {
		if err := os.Symlink(target, filepath.Join(root, Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	s, logs := open(t, root, t0.Add(time.Second))
	if _, ok := s.Find("crit"); ok {
		t.Fatal("read through a link")
	}
	if !strings.Contains(logs.String(), "Ignoring the preemption checkpoint") || !strings.Contains(logs.String(), "not a regular file") {
		t.Errorf("log %q, want the link ignored", logs)
	}
	if err := s.Record(Preemption{PodUID: "next", Started: t0}); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(target); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the link's target was changed: %v", err)
	}
	if info, err := os.Lstat(filepath.Join(root, Dir, Key)); err != nil || !info.Mode().IsRegular() {
		t.Errorf("the checkpoint after a write: %v, %v; want a regular file", info, err)
	}
}

// A checkpoint directory others could use is narrowed to the kubelet's
// alone, and the file in it, which they could have written, not trusted.
func TestOpenNarrowsTheDirectory(t *testing.T) {
	root := t.TempDir()
	plant(t, root, stateJSON(t, State{{PodUID: "crit", Started: t0, Victims: []Victim{{UID: "a", GracePeriodSeconds: 10, KillStarted: t0}}}}))
	if err := os.Chmod(filepath.Join(root, Dir), 0o777); err != nil {
		t.Fatal(err)
	}
	s, logs := open(t, root, t0.Add(time.Second))
	info, err := os.Stat(filepath.Join(root, Dir))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o700 {
		t.Errorf("checkpoint directory after Open: mode %s, want 0700", info.Mode())
	}
	if _, ok := s.Find("crit"); ok {
		t.Error("trusted a file others could write")
	}
	if !strings.Contains(logs.String(), "Narrowed the preemption checkpoint directory") || !strings.Contains(logs.String(), "open to others") {
		t.Errorf("log %q, want the narrowing and the file ignored", logs)
	}
}
