package explain

import (
	"bytes"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decoding of what kubectl writes (-o yaml or -o json) and of manifests as
// written for kubectl apply: one core/v1 object, or a List (or PodList,
// NodeList) of them. apimachinery's universal deserializer would parse a
// List's items twice (once as raw items, then each again); a 5,000-pod
// file is parsed here once, with the same JSON library and the same YAML
// conversion.

// DecodeNode decodes one Node, or a list holding exactly one.
func DecodeNode(data []byte) (*v1.Node, error) {
	return decodeOne[v1.Node](data, "Node")
}

// DecodePods decodes a Pod, a PodList or a List of Pods.
func DecodePods(data []byte) ([]*v1.Pod, error) {
	return decodeAll[v1.Pod](data, "Pod")
}

// DecodePod decodes the one Pod of a manifest. Without a namespace it is
// in default, where kubectl apply puts it under the default context.
func DecodePod(data []byte) (*v1.Pod, error) {
	pod, err := decodeOne[v1.Pod](data, "Pod")
	if err != nil {
		return nil, err
	}
	if pod.Namespace == "" {
		pod.Namespace = v1.NamespaceDefault
	}
	return pod, nil
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

// object is what a core/v1 object or list decodes into: the object's own
// type meta inline, a list's items in Items.
type object[T any] struct {
	metav1.TypeMeta `json:",inline"`
	Items           []T `json:"items"`
}

// decodeAll decodes data as one object of kind (type T) or a list of them.
func decodeAll[T any](data []byte, kind string) ([]*T, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, inputErrorf("empty: want a %s", kind)
	}
	if data[0] != '{' {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, inputErrorf("cannot decode: %v", firstLine(err.Error()))
		}
		data = j
	}
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
