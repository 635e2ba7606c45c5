package explain

import (
	"bytes"
	"fmt"

	yaml3 "go.yaml.in/yaml/v3"
)

// maxYAML bounds what a YAML input decodes from: its bytes, and its
// documents with every alias replaced by the node it names. Converting
// YAML to JSON holds some 25 times the YAML in memory at its peak, against
// 4 to 5 times for decoding JSON (BenchmarkOffline5000's pods): 64 MiB of
// YAML takes about as much (1.5 GiB) as the 256 MiB the command reads of
// JSON. It is some 34,000 pods as kubectl -o yaml writes them (9.8 MB for
// BenchmarkOffline5000's 5,000); more are better written as JSON or
// selected by node first. The expansion counts as the input does since a
// megabyte of anchors and aliases otherwise decodes to gigabytes: the
// converter (yaml.v2) refuses excessive aliasing by the count of nodes
// only, from 1,000 nodes, so a long string aliased a few hundred times, or
// once in each of thousands of pods, passes. A variable for the tests.
var maxYAML int64 = 64 << 20

// mib writes a limit in MiB where it is a whole number of them.
func mib(limit int64) string {
	if limit%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", limit>>20)
	}
	return fmt.Sprintf("%d bytes", limit)
}

func yamlTooLarge() error {
	return inputErrorf("YAML larger than the limit of %s for YAML (converting it takes some 25 times its size in memory): write it as JSON (kubectl -o json) or select the node's pods (--field-selector spec.nodeName=NODE)", mib(maxYAML))
}

// yamlSize is what doc decodes from: its length and, for each alias, the
// size of what it names, expanded; counted up to limit+1 only, so that an
// alias bomb is measured in the time its text takes to parse.
func yamlSize(doc []byte, limit int64) (int64, error) {
	size := int64(len(doc))
	if size > limit || !mayHoldAliases(doc) {
		return min(size, limit+1), nil
	}
	// yaml.v3's nodes keep each alias as a reference to its anchor's node,
	// unexpanded: the parse grows with the text, not the expansion.
	var root yaml3.Node
	if err := yaml3.Unmarshal(doc, &root); err != nil {
		return 0, fmt.Errorf("measuring its aliases: %w", err)
	}
	w := aliasWalk{limit: limit, sizes: map[*yaml3.Node]int64{}}
	added, err := w.added(&root)
	if err != nil {
		return 0, err
	}
	return min(size+added, limit+1), nil
}

// mayHoldAliases is false where doc cannot hold an alias: none of its '*'
// starts a node (the start of the text, or after a space, a line break or
// one of "[{,:"), or it has no '&' for an anchor. Most of kubectl's output
// is then not parsed a second time.
func mayHoldAliases(doc []byte) bool {
	if bytes.IndexByte(doc, '&') < 0 {
		return false
	}
	for i := bytes.IndexByte(doc, '*'); i >= 0; {
		if i == 0 || bytes.IndexByte([]byte(" \t\r\n[{,:"), doc[i-1]) >= 0 {
			return true
		}
		next := bytes.IndexByte(doc[i+1:], '*')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return false
}

// aliasWalk sizes nodes with their aliases expanded, each anchored node
// once (a bomb's nodes are few; its expansion is in the sums).
type aliasWalk struct {
	limit int64
	// sizes holds the anchored nodes sized, and -1 for those being sized:
	// an alias to one of them names a node that contains itself.
	sizes map[*yaml3.Node]int64
}

// added is what the aliases written within n add to it: the size of each
// one's node, at most limit+1.
func (w aliasWalk) added(n *yaml3.Node) (int64, error) {
	if n.Kind == yaml3.AliasNode {
		return w.size(n.Alias)
	}
	var s int64
	for _, c := range n.Content {
		cs, err := w.added(c)
		if err != nil {
			return 0, err
		}
		if s = min(s+cs, w.limit+1); s > w.limit {
			break
		}
	}
	return s, nil
}

// size is n's size, its aliases expanded, as JSON, roughly: its scalars'
// text with quotes and separators, at most limit+1.
func (w aliasWalk) size(n *yaml3.Node) (int64, error) {
	if n.Kind == yaml3.AliasNode {
		n = n.Alias
	}
	// Only an anchored node can be met twice, or within itself.
	anchored := n.Anchor != ""
	if s, ok := w.sizes[n]; ok && anchored {
		if s < 0 {
			return 0, fmt.Errorf("the value of anchor %q contains itself", n.Anchor)
		}
		return s, nil
	}
	if anchored {
		w.sizes[n] = -1
	}
	s := int64(len(n.Value)) + 3
	for _, c := range n.Content {
		cs, err := w.size(c)
		if err != nil {
			return 0, err
		}
		// Both are at most limit+1: the sum does not overflow.
		if s = min(s+cs, w.limit+1); s > w.limit {
			break
		}
	}
	if anchored {
		w.sizes[n] = s
	}
	return s, nil
}
