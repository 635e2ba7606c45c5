package checkpoint

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The byte bound never refuses what the count bounds allow: the largest
// file a node could need, every name at the API's longest, is written and
// read back.
func TestBoundsHoldTheLargestRealFile(t *testing.T) {
	zone := time.FixedZone("", 5*3600+30*60) // the longest RFC 3339 offset form
	at := time.Date(2026, 12, 5, 1, 0, 0, 123456789, zone)
	uid := func(c string) types.UID { return types.UID(strings.Repeat(c, 36)) }
	ns, name := strings.Repeat("n", 63), strings.Repeat("m", 253)
	s := make(State, maxPreemptions)
	for i := range s {
		s[i] = Preemption{PodUID: uid("p"), Namespace: ns, Name: name, Started: at}
	}
	for i := range maxVictims {
		p := &s[i%len(s)]
		p.Victims = append(p.Victims, Victim{UID: uid("v"), Namespace: ns, Name: name, GracePeriodSeconds: math.MaxInt64, KillStarted: at})
	}
	blob, err := encode(s)
	if err != nil {
		t.Fatalf("encoding the largest real state: %v", err)
	}
	t.Logf("%d bytes, bound %d", len(blob), maxFileBytes)
	got, err := decode(blob)
	if err != nil || len(got) != len(s) {
		t.Fatalf("decoding it: %d records, %v", len(got), err)
	}
}

// count must refuse whatever the decoder would decode beyond the bounds,
// whatever the JSON's shape; and pass what is within them.
func TestCountBeforeDecoding(t *testing.T) {
	many := func(n int, elem string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
	}
	over := []struct{ name, state string }{
		{"records", many(maxPreemptions+1, `{"podUID":"p"}`)},
		{"null records", many(maxPreemptions+1, `null`)},
		{"victims", `[{"podUID":"p","victims":` + many(maxVictims+1, `{"uid":"v"}`) + `}]`},
		{"null victims", `[{"victims":` + many(maxVictims+1, `null`) + `}]`},
		{"victims in all", many(2, `{"victims":`+many(maxVictims/2+1, `{}`)+`}`)},
		{"victims under another case", `[{"VICTIMS":` + many(maxVictims+1, `{}`) + `}]`},
		// U+017F folds to s, as the decoder matches field names.
		{"victims under a folded name", `[{"victim\u017f":` + many(maxVictims+1, `{}`) + `}]`},
		{"after a record with no victims", `[{"victims":null},` + strings.TrimPrefix(many(maxPreemptions, `{}`), "[")},
	}
	for _, tc := range over {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			if err := json.Unmarshal([]byte(tc.state), &s); err != nil {
				t.Fatalf("the decoder refuses it itself: %v", err)
			}
			var victims int
			for _, p := range s {
				victims += len(p.Victims)
			}
			if within(len(s), victims) == nil {
				t.Fatalf("decoded within the bounds: %d records, %d victims", len(s), victims)
			}
			if err := count([]byte(tc.state)); err == nil {
				t.Errorf("counted within the bounds: %d records, %d victims decoded", len(s), victims)
			}
		})
	}
	for _, state := range []string{
		`null`, `[]`, `[null]`, `[{"victims":null}]`,
		many(maxPreemptions, `{"podUID":"p","extra":{"victims":[1,2,3]},"victims":[{"uid":"v"}]}`),
		`[{"victims":` + many(maxVictims, `{"uid":"v","victims":[1]}`) + `}]`,
	} {
		if err := count([]byte(state)); err != nil {
			t.Errorf("%.60s...: %v, want it counted within the bounds", state, err)
		}
	}
}
