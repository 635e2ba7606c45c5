// Package isolation holds what keeps a local node's processes apart from the
// host, and what clears them out again: the node's namespaces (and a cluster
// machine's), entered only through descriptors opened from a holder checked
// to be none of the host's (Namespaces); the mount tables that say what is mounted where; the cgroups
// the node's pods live in; and killing what is left in them, or in the
// namespace, down to containerd's shims. What the node's namespace covers is
// the node's to plan (package localnode); this package does what the plan
// needs and reads back what it left.
package isolation
