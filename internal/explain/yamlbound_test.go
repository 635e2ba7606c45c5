package explain

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The YAML limit counts the input's bytes, and with aliases what they
// expand to, over all its documents; JSON is not bounded by it.
func TestYAMLLimitCounts(t *testing.T) {
	defer func(m int64) { maxYAML = m }(maxYAML)
	pods, err := os.ReadFile("testdata/pods.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The limit counts the bytes within the space around them.
	pods = bytes.TrimSpace(pods)
	// A pod whose eleven annotations are one 1,000-byte string: some
	// 11,000 bytes from 1,100.
	aliased := func(name string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  annotations:\n    a0: &s %s\n", name, strings.Repeat("x", 1000))
		for i := 1; i <= 10; i++ {
			fmt.Fprintf(&b, "    a%d: *s\n", i)
		}
		return b.String()
	}
	const cron = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  annotations:\n    cron: '*/5 * * * *'\n    url: a?b&c"
	const json = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"a":"` + "%s" + `"}}}`
	for name, tc := range map[string]struct {
		limit int
		data  string
		want  string
	}{
		"at the limit":                        {len(pods), string(pods), ""},
		"past the limit":                      {len(pods) - 1, string(pods), fmt.Sprintf("YAML larger than the limit of %d bytes for YAML", len(pods)-1)},
		"aliases within the limit":            {12000, aliased("a"), ""},
		"aliases past the limit":              {10000, aliased("a"), "document 1: its aliases expanded, the YAML comes to more than the limit of 10000 bytes for YAML"},
		"documents' aliases within the limit": {24000, aliased("a") + "---\n" + aliased("b"), ""},
		"documents' aliases past the limit":   {20000, aliased("a") + "---\n" + aliased("b"), "document 2: its aliases expanded"},
		"JSON past the limit":                 {100, fmt.Sprintf(json, strings.Repeat("x", 1000)), ""},
		// Measured for its " *", as no larger than its bytes.
		"'*' not starting an alias": {len(cron), cron, ""},
	} {
		t.Run(name, func(t *testing.T) {
			maxYAML = int64(tc.limit)
			_, err := DecodePods([]byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !isInput(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an InputError holding %q", err, tc.want)
			}
		})
	}
}

// mayHoldAliases may say yes where there is no alias (the document is
// then measured), never no where there is one.
func TestMayHoldAliases(t *testing.T) {
	for doc, want := range map[string]bool{
		"a: &x 1\nb: *x\n":                   true,
		"a: &x 1\nb: [*x]\n":                 true,
		"a: &x 1\nb: [1,*x]\n":               true,
		"a: &x 1\nb: {c:*x}\n":               true,
		"a: &x 1\nb: {*x : 1}\n":             true,
		"a: &x [1]\nb:\n- *x\n":              true,
		"a: &x [1]\nb:\n\t*x\n":              true,
		"&x [1]\n---\n*x\n":                  true,
		"*x":                                 false,
		"a: 5 * * * *\nb: R & D\n":           true,
		"a: '*/5 * * * *'\n":                 false,
		"a: \"*\"\nb: &x 1\n":                false,
		"url: a?b=1&c=2\nglob: /var/*.log\n": false,
		"a: *x\n":                            false,
	} {
		if got := mayHoldAliases([]byte(doc)); got != want {
			t.Errorf("%q: %t, want %t", doc, got, want)
		}
	}
}
