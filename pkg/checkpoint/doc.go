// Package checkpoint records the critical-pod preemptions a kubelet has
// under way, so that a kubelet restarted in the middle of one continues it
// (the preemption-resume patch of pkg/patched) instead of choosing and
// signalling its victims again with a new grace period.
//
// The record is node-local, a file under the kubelet's root directory,
// <root>/critlet/preemptions, as the device manager keeps its own. It must
// exist before the first victim is signalled and be read before the
// restarted kubelet admits the critical pod: the API server may be
// unreachable at either moment, and the pod status the kubelet publishes
// is written asynchronously by its status manager, so the API cannot hold
// the intent in time.
//
// Only root can write the file, but a damaged or forged one can do no more
// than one a kubelet wrote:
//
//   - <root>/critlet is created with mode 0700 (an existing one is narrowed
//     to it, and the file in it not trusted) and opened, like the file,
//     without following links (os.Root, checked against Lstat): a link in
//     either place would redirect the kubelet's reads and writes. A link
//     in the directory's place is an error, and the kubelet runs on without
//     resuming; one in the file's place is not read, and the next write
//     replaces the link, not its target. A write goes to a temporary file,
//     synced, renamed over the checkpoint, then the directory synced:
//     upstream's checkpointmanager, which this package no longer uses,
//     checks no link and does not sync the directory.
//   - A file over 4 MiB, or holding more than 1024 preemptions or 4096
//     victims in all, is not decoded (the counts are taken from the JSON
//     before it is), and none is written. A node runs at most a few hundred
//     pods and admits one critical pod at a time, so a real file holds a
//     few records and at most a few hundred victims; the bounds allow
//     several times that, every name at its longest (file.go).
//   - A preemption whose times no kubelet writes (started ≤ a victim's
//     killStarted ≤ now, no negative grace) is dropped whole, at reading
//     and whenever it is looked up, as is one gone stale (5 minutes past
//     its longest grace); the kubelet then preempts afresh, as the stock
//     kubelet does. A victim is never given more than its whole grace
//     period, whatever the clock did since its kill began.
//
// A file the kubelet cannot trust is logged ("Ignoring the preemption
// checkpoint") and ignored, and the next write replaces it.
//
// The pure part (state.go) says what a record holds, when it can be
// trusted and how a preemption is resumed from it; file.go is the on-disk
// format (versioned, checksummed over its own bytes so that any version can
// verify it) and its bounds; store.go does the I/O. The stock kubelet never
// reads the file.
package checkpoint
