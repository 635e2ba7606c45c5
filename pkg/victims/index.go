package victims

import "math"

// index answers "which remaining pod of one QoS class is closest to the
// need?" without rescanning every pod for every victim.
//
// Pods sit in the leaves of an implicit binary tree, placed in k-d order so
// that a subtree holds pods of similar size. Each node keeps the
// component-wise maximum of its live pods' request vectors and its live pod
// that comes first in tie order. Because distance never increases when any
// request grows, the distance of that maximum is a lower bound for every pod
// below the node, and a branch-and-bound descent prunes every subtree that
// cannot beat the best pod found so far. Requirements may shrink between
// queries: the tree stores raw requests, so nothing is rebuilt.
//
// The index also replays the stock kubelet's slice bookkeeping (a chosen pod
// is replaced by the last one), because on a full tie the stock kubelet takes
// the pod that comes last in that slice.
type index struct {
	dims   int
	x      []int64 // x[i*dims+j]: request of pod i for requirement j
	memory []int64
	cpu    []int64
	pos    []int32 // pod -> position in the replayed slice
	at     []int32 // position -> pod
	live   int

	leaves int     // leaf count, a power of two
	leafOf []int32 // pod -> leaf slot
	max    []int64 // max[node*dims+j]; -1 where a node has no live pod
	first  []int32 // node -> live pod first in tie order, -1 if none

	stack []frame // reused by best
}

type frame struct {
	node  int
	bound float64
}

// newIndex indexes the pods whose flat request vectors are x (dims values
// each), in slice order. q orients the k-d split and may be nil.
func newIndex(dims int, x, memory, cpu []int64, q []int64) *index {
	n := len(memory)
	leaves := 1
	for leaves < n {
		leaves <<= 1
	}
	ix := &index{
		dims:   dims,
		x:      x,
		memory: memory,
		cpu:    cpu,
		pos:    make([]int32, n),
		at:     make([]int32, n),
		live:   n,
		leaves: leaves,
		leafOf: make([]int32, n),
		max:    make([]int64, 2*leaves*dims),
		first:  make([]int32, 2*leaves),
	}
	order := make([]int32, n)
	for i := range n {
		ix.pos[i] = int32(i)
		ix.at[i] = int32(i)
		order[i] = int32(i)
	}
	ix.arrange(order, 0, leaves, q)
	for i := range ix.max {
		ix.max[i] = -1
	}
	for i := range ix.first {
		ix.first[i] = -1
	}
	for slot, p := range order {
		ix.leafOf[p] = int32(slot)
		node := leaves + slot
		copy(ix.max[node*dims:(node+1)*dims], x[int(p)*dims:(int(p)+1)*dims])
		ix.first[node] = p
	}
	for node := leaves - 1; node >= 1; node-- {
		ix.pull(node)
	}
	return ix
}

// arrange puts order[lo:hi) (leaf slots of one subtree) in k-d order: the
// larger half along the dimension where the pods differ most, relative to
// the need, goes left.
func (ix *index) arrange(order []int32, lo, hi int, q []int64) {
	end := min(hi, len(order))
	if end-lo <= 1 || ix.dims == 0 {
		return
	}
	mid := (lo + hi) / 2
	if mid >= end {
		ix.arrange(order, lo, mid, q)
		return
	}
	dim, best := 0, -1.0
	for j := 0; j < ix.dims; j++ {
		lowest, highest := int64(math.MaxInt64), int64(math.MinInt64)
		for _, p := range order[lo:end] {
			v := ix.x[int(p)*ix.dims+j]
			lowest, highest = min(lowest, v), max(highest, v)
		}
		scale := float64(1)
		if q != nil && q[j] > 0 {
			lowest, highest = min(lowest, q[j]), min(highest, q[j])
			scale = float64(q[j])
		}
		if spread := float64(highest-lowest) / scale; spread > best {
			dim, best = j, spread
		}
	}
	ix.selectLargest(order[lo:end], mid-lo, dim)
	ix.arrange(order, lo, mid, q)
	ix.arrange(order, mid, hi, q)
}

// selectLargest reorders s so that its first k pods have the largest requests
// along dim (quickselect with a three-way partition, so runs of equal
// requests cost linear time).
func (ix *index) selectLargest(s []int32, k, dim int) {
	key := func(p int32) int64 { return ix.x[int(p)*ix.dims+dim] }
	for len(s) > 1 {
		a, b, c := key(s[0]), key(s[len(s)/2]), key(s[len(s)-1])
		pivot := max(min(a, b), min(max(a, b), c)) // median of three
		// [0,gt): > pivot, [gt,i): == pivot, (lt,end): < pivot
		gt, i, lt := 0, 0, len(s)-1
		for i <= lt {
			switch v := key(s[i]); {
			case v > pivot:
				s[gt], s[i] = s[i], s[gt]
				gt++
				i++
			case v < pivot:
				s[i], s[lt] = s[lt], s[i]
				lt--
			default:
				i++
			}
		}
		switch {
		case k < gt:
			s = s[:gt]
		case k <= i:
			return
		default:
			s, k = s[i:], k-i
		}
	}
}

// pull recomputes an internal node from its children.
func (ix *index) pull(node int) {
	d := ix.dims
	l, r := 2*node, 2*node+1
	for j := 0; j < d; j++ {
		ix.max[node*d+j] = max(ix.max[l*d+j], ix.max[r*d+j])
	}
	ix.first[node] = ix.earlier(ix.first[l], ix.first[r])
}

// earlier returns whichever of a and b the stock kubelet prefers among pods
// at equal distance: smaller memory, then smaller cpu, then the later
// position in its slice. -1 means no pod.
func (ix *index) earlier(a, b int32) int32 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case ix.tieBefore(a, b):
		return a
	}
	return b
}

func (ix *index) tieBefore(a, b int32) bool {
	if ix.memory[a] != ix.memory[b] {
		return ix.memory[a] < ix.memory[b]
	}
	if ix.cpu[a] != ix.cpu[b] {
		return ix.cpu[a] < ix.cpu[b]
	}
	return ix.pos[a] > ix.pos[b]
}

// distance is the stock kubelet's distance of a request vector from the
// remaining need: the sum, in requirement order, of the squared unmet
// fraction of each requirement still open (q[j] > 0). v*v equals
// math.Pow(v, 2) here: Pow squares the mantissa exactly as a product does,
// and v >= 1/MaxInt64 keeps the square far from subnormals.
//
// The square is rounded before it is added, as the stock kubelet's Pow
// result is: without the float64 conversion, Go may fuse the multiply and
// the add into one instruction (FMA, on arm64 and on amd64 from GOAMD64=v3),
// which skips that rounding and changes victims on near-ties.
func distance(q, x []int64) float64 {
	d := 0.0
	for j, need := range q {
		if need <= 0 {
			continue
		}
		if rest := float64(need - x[j]); rest > 0 {
			v := rest / float64(need)
			d += float64(v * v)
		}
	}
	return d
}

// best returns the live pod the stock kubelet would pick for need q, or -1
// when no pod is left.
func (ix *index) best(q []int64) int32 {
	d := ix.dims
	best, bestDist := int32(-1), math.Inf(1)
	stack := append(ix.stack[:0], frame{1, distance(q, ix.max[d:2*d])})
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		node := f.node
		if ix.first[node] < 0 || f.bound > bestDist ||
			(f.bound == bestDist && !ix.tieBefore(ix.first[node], best)) {
			continue
		}
		if node >= ix.leaves {
			// A leaf's bound is its pod's own distance.
			best, bestDist = ix.first[node], f.bound
			continue
		}
		l, r := 2*node, 2*node+1
		lb, rb := distance(q, ix.max[l*d:(l+1)*d]), distance(q, ix.max[r*d:(r+1)*d])
		// Push the less promising child first so the other is searched first
		// and tightens the bound sooner.
		if lb < rb || (lb == rb && ix.earlier(ix.first[l], ix.first[r]) == ix.first[l]) {
			stack = append(stack, frame{r, rb}, frame{l, lb})
		} else {
			stack = append(stack, frame{l, lb}, frame{r, rb})
		}
	}
	ix.stack = stack
	return best
}

// remove takes pod p out, replaying the stock kubelet's removal: the last pod
// of its slice moves into p's position.
func (ix *index) remove(p int32) {
	ix.live--
	last := ix.at[ix.live]
	if last != p {
		ix.pos[last] = ix.pos[p]
		ix.at[ix.pos[p]] = last
	}
	node := ix.leaves + int(ix.leafOf[p])
	for j := 0; j < ix.dims; j++ {
		ix.max[node*ix.dims+j] = -1
	}
	ix.first[node] = -1
	ix.fix(node)
	if last != p {
		// A moved pod's tie order changed; only its leaf-to-root path knows it.
		ix.fix(ix.leaves + int(ix.leafOf[last]))
	}
}

func (ix *index) fix(node int) {
	for node >>= 1; node >= 1; node >>= 1 {
		ix.pull(node)
	}
}
