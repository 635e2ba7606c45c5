// Package patched declares every change critlet makes to upstream's
// kubelet (Patches), and lets a built binary prove at run time that each is
// linked in: the build adds to each patched package a file calling
// Register, and the kubelet main calls Verify and refuses to start unless
// every declared patch registered exactly as declared.
//
// How a declaration becomes a build (the overlay, replaced and extended
// packages, hooks, the build tag) is told once, in docs/patched-build.md.
package patched
