package explain

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decoding of what kubectl writes (-o yaml or -o json) and of manifests as
// written for kubectl apply: one core/v1 object, or a List (or PodList,
// NodeList) of them, or several of either as YAML documents or JSON values
// one after another. apimachinery's universal deserializer would parse a
// List's items twice (once as raw items, then each again); a 5,000-pod
// file is parsed here once, with the same JSON library and the same YAML
// conversion.

// DecodeNode decodes the one Node of data.
func DecodeNode(data []byte) (*v1.Node, error) {
	return decodeOne[v1.Node](data, "Node")
}

// DecodePods decodes every Pod of data. A pod listed twice would be counted
// twice (two dumps concatenated): it is an error.
func DecodePods(data []byte) ([]*v1.Pod, error) {
	pods, err := decodeAll[v1.Pod](data, "Pod")
	if err != nil {
		return nil, err
	}
	if name, ok := duplicatePod(pods); ok {
		return nil, inputErrorf("pod %s is listed twice", name)
	}
	return pods, nil
}

// DecodePod decodes the one Pod of a manifest and defaults it as the API
// server does before the kubelet sees it (a container's requests taken
// from its limits where it sets none, among others). Without a namespace
// it is in default, where kubectl apply puts it under the default context.
func DecodePod(data []byte) (*v1.Pod, error) {
	pod, err := decodeOne[v1.Pod](data, "Pod")
	if err != nil {
		return nil, err
	}
	if pod.Namespace == "" {
		pod.Namespace = v1.NamespaceDefault
	}
	corev1defaults.SetObjectDefaults_Pod(pod)
	return pod, nil
}

// duplicatePod returns the first namespace/name that two pods share.
func duplicatePod(pods []*v1.Pod) (string, bool) {
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if seen[key] {
			return key, true
		}
		seen[key] = true
	}
	return "", false
}

func decodeOne[T any](data []byte, kind string) (*T, error) {
	objs, err := decodeAll[T](data, kind)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, inputErrorf("want exactly one %s, found %d", kind, len(objs))
	}
	return objs[0], nil
}

// decodeAll decodes every document of data, each one object of kind (type
// T) or a list of them.
func decodeAll[T any](data []byte, kind string) ([]*T, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		objs, err := decodeDocuments[T]([]document{{n: 1, json: data}}, kind)
		if err != nil {
			// Several JSON values one after another fail as one: they are
			// split only then, as a split scans the input once more, and
			// kubectl -o json writes one value, however many pods.
			if values := jsonValues(data); len(values) > 1 {
				return decodeDocuments[T](values, kind)
			}
		}
		return objs, err
	}
	docs, err := yamlDocuments(data)
	if err != nil {
		return nil, err
	}
	return decodeDocuments[T](docs, kind)
}

// document is one document of an input, as JSON; n counts from 1.
type document struct {
	n    int
	json []byte
}

func decodeDocuments[T any](docs []document, kind string) ([]*T, error) {
	if len(docs) == 0 {
		return nil, inputErrorf("empty: want a %s", kind)
	}
	var all []*T
	for _, d := range docs {
		objs, err := decodeDocument[T](d.json, kind)
		if err != nil && len(docs) > 1 {
			err = fmt.Errorf("document %d: %w", d.n, err)
		}
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

// yamlDocuments splits a YAML stream into its documents, as JSON. Documents
// holding nothing (comments only, or nothing between two separators) are
// skipped, as kubectl skips them, but keep their number.
func yamlDocuments(data []byte) ([]document, error) {
	if int64(len(data)) > maxYAML {
		return nil, yamlTooLarge()
	}
	var docs []document
	// What the documents may yet decode from, their aliases expanded.
	left := maxYAML
	add := func(n int, doc []byte) error {
		size, err := yamlSize(doc, left)
		if err != nil {
			return inputErrorf("document %d: cannot decode: %v", n, firstLine(err.Error()))
		}
		if left -= size; left < 0 {
			return inputErrorf("document %d: its aliases expanded, the YAML comes to more than the limit of %s for YAML", n, mib(maxYAML))
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return inputErrorf("document %d: cannot decode: %v", n, firstLine(err.Error()))
		}
		if !bytes.Equal(j, []byte("null")) {
			docs = append(docs, document{n: n, json: j})
		}
		return nil
	}
	// kubectl -o yaml writes one document, not split here: the split
	// copies it line by line, 2 to 9% of converting it.
	if !bytes.HasPrefix(data, []byte("---")) && !bytes.Contains(data, []byte("\n---")) {
		if err := add(1, data); err != nil {
			return nil, err
		}
		return docs, nil
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err == nil {
			err = add(n, doc)
		} else {
			err = inputErrorf("document %d: cannot decode: %v", n, firstLine(err.Error()))
		}
		if err != nil {
			return nil, err
		}
	}
}

// jsonValues splits JSON values written one after another; nil when data
// is not such a sequence.
func jsonValues(data []byte) []document {
	var docs []document
	dec := json.NewDecoder(bytes.NewReader(data))
	for n := 1; ; n++ {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			return docs
		} else if err != nil {
			return nil
		}
		docs = append(docs, document{n: n, json: v})
	}
}

// object is what a core/v1 object or list decodes into: the object's own
// type meta inline, a list's items in Items.
type object[T any] struct {
	metav1.TypeMeta `json:",inline"`
	Items           []T `json:"items"`
}

// decodeDocument decodes one JSON document: an object of kind (type T) or a
// list of them.
func decodeDocument[T any](data []byte, kind string) ([]*T, error) {
	// One pass for a list; a single object, small, is decoded again as
	// itself.
	var list object[T]
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &list); err != nil {
		return nil, inputErrorf("cannot decode: %v", firstLine(err.Error()))
	}
	head := list.TypeMeta
	if head.APIVersion != "v1" {
		return nil, inputErrorf("found apiVersion %q kind %q, want a v1 %s or a list of them", head.APIVersion, head.Kind, kind)
	}
	switch head.Kind {
	case kind:
		obj := new(T)
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
			return nil, inputErrorf("cannot decode the %s: %v", kind, firstLine(err.Error()))
		}
		return []*T{obj}, nil
	case "List", kind + "List":
		out := make([]*T, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
			// A typed list's items carry no kind; a List's each name theirs.
			gvk := any(out[i]).(runtime.Object).GetObjectKind().GroupVersionKind()
			if head.Kind == "List" && (gvk.Kind != kind || gvk.GroupVersion().String() != "v1") {
				return nil, inputErrorf("item %d of the List is a %s (%s), want a v1 %s", i, gvk.Kind, gvk.GroupVersion(), kind)
			}
		}
		return out, nil
	}
	return nil, inputErrorf("found a %s, want a %s or a list of them", head.Kind, kind)
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
