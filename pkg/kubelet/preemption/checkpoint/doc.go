// Package checkpoint records the critical-pod preemptions a kubelet has
// under way, so that a kubelet restarted in the middle of one continues it
// (the preemption-resume patch of pkg/patched) instead of choosing and
// signalling its victims again with a new grace period.
//
// The record is node-local, a file under the kubelet's root directory
// written through upstream's checkpointmanager, as the device manager keeps
// its own. It must exist before the first victim is signalled and be read
// before the restarted kubelet admits the critical pod: the API server may
// be unreachable at either moment, and the pod status the kubelet publishes
// is written asynchronously by its status manager, so the API cannot hold
// the intent in time.
//
// The pure part (state.go) says what a record holds and how a preemption
// is resumed from it; file.go is the on-disk format (versioned, checksummed
// over its own bytes so that any version can verify it); store.go does the
// I/O. The stock kubelet never reads the file.
package checkpoint
