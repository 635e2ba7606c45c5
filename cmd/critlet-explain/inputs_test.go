package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The fixtures' pods as YAML documents, one pod each, explain as the List
// they come from: every document is read, not the first alone.
func TestPodsFileOfDocuments(t *testing.T) {
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(testdata, "pods.yaml"))), &list); err != nil {
		t.Fatal(err)
	}
	var docs strings.Builder
	for _, item := range list.Items {
		y, err := yaml.Marshal(item)
		if err != nil {
			t.Fatal(err)
		}
		docs.WriteString("---\n")
		docs.Write(y)
	}
	podsFile := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(podsFile, []byte(docs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(testdata, "agent.yaml")
	wantCode, want, _ := explainCmd(t, "", offline("--pod", agent)...)
	code, out, errOut := explainCmd(t, "", "--node-file", filepath.Join(testdata, "node.yaml"), "--pods-file", podsFile, "--pod", agent)
	if code != wantCode || out != want {
		t.Fatalf("%d documents: exit %d (stderr %q), output:\n%s\nwant exit %d and, as from the List:\n%s", len(list.Items), code, errOut, out, wantCode, want)
	}
}

// Each input is read up to maxInput bytes, not one more.
func TestInputLimit(t *testing.T) {
	agent := filepath.Join(testdata, "agent.yaml")
	manifest := readFile(t, agent)
	podsFile := filepath.Join(testdata, "pods.yaml")
	largest := len(readFile(t, podsFile))
	if n := len(readFile(t, filepath.Join(testdata, "node.yaml"))); n >= largest || len(manifest) >= largest {
		t.Fatal("the pods file is not the largest input: the cases below assume it")
	}
	// The manifest, grown by a comment to n bytes.
	padded := func(n int) string { return manifest + "#" + strings.Repeat("x", n-len(manifest)-2) + "\n" }
	defer func(m int64) { maxInput = m }(maxInput)
	for name, tc := range map[string]struct {
		limit  int
		stdin  string
		code   int
		stderr string
	}{
		"each file at the limit":   {limit: largest, code: 5},
		"pods file past the limit": {limit: largest - 1, code: 3, stderr: "--pods-file " + podsFile + ": larger than the input limit of " + strconv.Itoa(largest-1) + " bytes"},
		"pod file past the limit":  {limit: len(manifest) - 1, code: 3, stderr: "--pod " + agent + ": larger than the input limit"},
		"stdin at the limit":       {limit: largest, stdin: padded(largest), code: 5},
		"stdin past the limit":     {limit: largest, stdin: padded(largest + 1), code: 3, stderr: "--pod: reading standard input: larger than the input limit"},
	} {
		t.Run(name, func(t *testing.T) {
			maxInput = int64(tc.limit)
			args := offline("--pod", agent)
			if tc.stdin != "" {
				args = offline("--pod", "-")
			}
			code, _, errOut := explainCmd(t, tc.stdin, args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.stderr)
			}
		})
	}
	// A standard input without end (a device, a stream) is read no further
	// than the limit. (This one ends, at 16 times the limit, so that a
	// read without a limit fails the test rather than hangs it.)
	maxInput = 1 << 20
	stream := &comments{left: 16 << 20}
	var errOut strings.Builder
	code := run(context.Background(), offline("--pod", "-"), stream, io.Discard, &errOut)
	if read := 16<<20 - stream.left; code != 3 || !strings.Contains(errOut.String(), "larger than the input limit of 1 MiB") || read > maxInput+1 {
		t.Errorf("a long standard input: exit %d, stderr %q, %d bytes read; want 3, the limit named, at most %d bytes read", code, errOut.String(), read, maxInput+1)
	}
	if got := tooLarge(256 << 20).Error(); got != "larger than the input limit of 256 MiB" {
		t.Errorf("the limit reads %q", got)
	}
}

// comments reads as YAML comments, left bytes of them.
type comments struct{ left int64 }

func (c *comments) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.left)]
	for i := range p {
		p[i] = "#\n"[i%2]
	}
	c.left -= int64(len(p))
	return len(p), nil
}
