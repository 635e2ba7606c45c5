package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	state := t.TempDir()
	// A directory another user (nobody) owns: refused, saying why and what
	// to do.
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"no command", nil, 2, "", "usage: local-node up|down|status"},
		{"unknown command", []string{"start"}, 2, "", `unknown command "start"`},
		{"bad flag", []string{"up", "--no-such-flag"}, 2, "", "unknown flag: --no-such-flag"},
		{"single-dash long flag", []string{"status", "-state", state}, 2, "", "unknown shorthand flag"},
		{"negative max pods", []string{"up", "--state", state, "--max-pods", "-1"}, 2, "", "--max-pods must not be negative"},
		{"status of nothing", []string{"status", "--state", state}, 0, "kube-apiserver  not started", ""},
		{"down of nothing", []string{"down", "--state", state}, 0, "not a local node's state directory: nothing done", ""},
		{"down of another user's directory", []string{"down", "--state", theirs}, 1, "", "state directory " + theirs + " refused: " + theirs + " is owned by uid 65534"},
		{"up in another user's directory", []string{"up", "--state", theirs}, 1, "", "chown root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), c.args, &out, &errb)
			if code != c.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, c.code, errb.String())
			}
			if !strings.Contains(out.String(), c.out) {
				t.Errorf("stdout %q lacks %q", out.String(), c.out)
			}
			if !strings.Contains(errb.String(), c.err) {
				t.Errorf("stderr %q lacks %q", errb.String(), c.err)
			}
		})
	}
}
