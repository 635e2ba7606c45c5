package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Every document of an input counts: the fixtures' pods split into YAML
// documents, or written as JSON values one after another, are the same
// pods as the List they come from.
func TestDecodeEveryDocument(t *testing.T) {
	_, want := fixtures(t)
	var yamlDocs, jsonValues bytes.Buffer
	// A separator first, and a document of comments only, as kubectl
	// accepts them.
	yamlDocs.WriteString("---\n# the node's pods\n")
	for i, p := range want {
		p := p.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod"
		y, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			// One document a list of one, another empty.
			y, err = yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "PodList", "items": []any{p}})
			if err != nil {
				t.Fatal(err)
			}
			yamlDocs.WriteString("---\n")
		}
		yamlDocs.WriteString("---\n")
		yamlDocs.Write(y)
		j, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		jsonValues.Write(j)
		jsonValues.WriteString("\n")
	}
	for name, data := range map[string][]byte{"yaml documents": yamlDocs.Bytes(), "json values": jsonValues.Bytes()} {
		got, err := DecodePods(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d pods, want %d", name, len(got), len(want))
		}
		for i := range got {
			// The List's items carry their kind, as kubectl writes them.
			if !reflect.DeepEqual(got[i].Spec, want[i].Spec) || got[i].Name != want[i].Name || got[i].Namespace != want[i].Namespace {
				t.Errorf("%s: pod %d is %s/%s, want %s/%s as the List has it", name, i, got[i].Namespace, got[i].Name, want[i].Namespace, want[i].Name)
			}
		}
	}
}

// What cannot be meant is refused, naming the document at fault.
func TestDecodeRefusesWhatCannotBeMeant(t *testing.T) {
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: shop}\nspec: {containers: [{name: c, image: i}]}\n"
	const node = "apiVersion: v1\nkind: Node\nmetadata: {name: %s}\n"
	podDoc := func(name string) string { return strings.ReplaceAll(pod, "%s", name) }
	nodeDoc := func(name string) string { return strings.ReplaceAll(node, "%s", name) }
	for name, tc := range map[string]struct {
		decode func(data []byte) error
		data   string
		want   string
	}{
		"two pods for one":         {decodePod, podDoc("a") + "---\n" + podDoc("b"), "want exactly one Pod, found 2"},
		"two pods in JSON for one": {decodePod, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}` + "\n" + `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}`, "want exactly one Pod, found 2"},
		"two nodes":                {decodeNode, nodeDoc("a") + "---\n" + nodeDoc("b"), "want exactly one Node, found 2"},
		"a node and a pod":         {decodeNode, "# comments only\n---\n" + nodeDoc("a") + "---\n" + podDoc("b"), "document 3: found a Pod, want a Node"},
		"no document":              {decodePods, "---\n# nothing\n---\n", "empty: want a Pod"},
		"nothing at all":           {decodePods, " \n", "empty: want a Pod"},
		"a pod twice":              {decodePods, podDoc("a") + "---\n" + podDoc("b") + "---\n" + podDoc("a"), "pod shop/a is listed twice"},
		"malformed second":         {decodePods, podDoc("a") + "---\nkind: [Pod\n", "document 2: cannot decode"},
		"malformed separator":      {decodePods, podDoc("a") + "--- kind: Pod\n", "invalid Yaml document separator"},
		"JSON then garbage":        {decodePods, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}} x`, "cannot decode: invalid character 'x' after top-level value"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.decode([]byte(tc.data))
			var input *InputError
			if !errors.As(err, &input) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an InputError holding %q", err, tc.want)
			}
		})
	}
}

func decodePod(data []byte) error  { _, err := DecodePod(data); return err }
func decodeNode(data []byte) error { _, err := DecodeNode(data); return err }
func decodePods(data []byte) error { _, err := DecodePods(data); return err }

// A JSON value is decoded as it is, not split first (the split scans it
// once more): a List whose items are objects one after another but for
// their commas is one document.
func TestDecodeOneJSONValue(t *testing.T) {
	pods, err := DecodePods([]byte(`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a","annotations":{"x":"}{"}}},{"metadata":{"name":"b"}}]}`))
	if err != nil || len(pods) != 2 || pods[0].Annotations["x"] != "}{" {
		t.Fatalf("pods %v, %v: want a and b", pods, err)
	}
}

// aliasBomb is a PodList of n pods annotated with one size-byte string
// through an anchor: some n*size bytes decoded from some size.
func aliasBomb(n, size int) []byte {
	var b bytes.Buffer
	b.WriteString("apiVersion: v1\nkind: PodList\nitems:\n")
	fmt.Fprintf(&b, "- metadata: {name: p0, annotations: {a: &big %s}}\n", strings.Repeat("x", size))
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "- metadata: {name: p%d, annotations: {a: *big}}\n", i)
	}
	return b.Bytes()
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// YAML aliases expanding past the YAML limit are refused before anything
// is expanded: with little memory, as the limit is meant to bound memory.
func TestYAMLAliasBombs(t *testing.T) {
	var laughs strings.Builder
	laughs.WriteString("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for c := 'b'; c <= 'i'; c++ {
		fmt.Fprintf(&laughs, "%c: &%c [%s]\n", c, c, strings.TrimSuffix(strings.Repeat("*"+string(c-1)+", ", 10), ", "))
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		// 2,000 pods of 1 MiB each: 2 GiB of JSON from 1.1 MiB.
		"a large string, aliased": {aliasBomb(2000, 1<<20), "document 1: its aliases expanded, the YAML comes to more than the limit of 64 MiB for YAML"},
		// Nine levels of ten: a billion strings from 600 bytes.
		"nested lists, aliased": {[]byte(laughs.String()), "its aliases expanded, the YAML comes to more than the limit of 64 MiB"},
		"a node within itself":  {[]byte("apiVersion: v1\nkind: Pod\nmetadata: &m {name: a, labels: *m}\n"), `document 1: cannot decode: the value of anchor "m" contains itself`},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = DecodePods(tc.data) })
			if !isInput(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want an InputError holding %q", err, tc.want)
			}
			// The input's size a few times over, not the expansion's.
			if limit := uint64(64 << 20); n > limit {
				t.Errorf("allocated %d MiB refusing a %d-byte input, want at most %d MiB", n>>20, len(tc.data), limit>>20)
			}
		})
	}
}

// YAML is decoded from 64 MiB at most, JSON not bounded here: converting
// YAML holds some 25 times its size in memory.
func TestYAMLLimit(t *testing.T) {
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"
	padded := []byte(pod + "#" + strings.Repeat("x", 64<<20-len(pod)) + "\n")
	var err error
	if n := allocated(func() { _, err = DecodePod(padded) }); !isInput(err) || !strings.Contains(err.Error(), "YAML larger than the limit of 64 MiB for YAML") || n > 1<<20 {
		t.Errorf("64 MiB and 1 byte of YAML: error %v, %d bytes allocated; want an InputError naming the limit, at once", err, n)
	}
}

// Aliases within the limit decode as the nodes they name.
func TestYAMLAliases(t *testing.T) {
	const spec = "\nspec:\n  containers:\n  - name: c\n    image: i\n"
	aliased, err := DecodePod([]byte("apiVersion: v1\nkind: Pod\nmetadata: &m {name: a, labels: &l {app: a}, annotations: *l}" + spec + "    resources: {requests: &r {cpu: 100m, memory: 64Mi}, limits: *r}\n"))
	if err != nil {
		t.Fatal(err)
	}
	written, err := DecodePod([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {app: a}, annotations: {app: a}}" + spec + "    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(aliased, written) {
		t.Errorf("aliased:\n%v\nwant, as written out:\n%v", aliased, written)
	}
}

// A manifest's pod is defaulted as the API server defaults it before the
// kubelet sees it: limits alone stand for requests.
func TestDecodePodDefaultsAsTheAPIServer(t *testing.T) {
	pod, err := DecodePod([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1300m","example.com/dongle":"1"}}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	req := pod.Spec.Containers[0].Resources.Requests
	if req.Cpu().MilliValue() != 1300 || req.Name("example.com/dongle", resource.DecimalSI).Value() != 1 {
		t.Errorf("requests %v, want the limits", req)
	}
}
