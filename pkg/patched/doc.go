// Package patched declares every change critlet makes to upstream's
// kubelet, and lets a built binary prove at run time that each is linked in.
//
// A patch changes upstream in up to three ways, all applied by the build to
// its view of the pinned k8s.io/kubernetes module through go build -overlay
// (the module copy itself stays pristine: the stock kubelet builds from it):
//
//   - Replaces: an upstream package replaced whole by the project's package
//     at the mirrored path.
//   - Extends: files added to an upstream package, named critlet_*.go, at the
//     mirrored path, so they can reach the package's unexported code. They
//     carry the build constraint BuildTag, which only the patched build sets.
//   - Hooks: single calls appended to single upstream lines of named
//     functions, so the hooked file keeps upstream's line numbers. A hook
//     whose line is not found exactly once in its function stops the build,
//     naming the patch and the file: a version bump shows what to port.
//
// For each patch the build also adds a file to the patched package that
// calls Register with the patch's name, the package's import path and the
// hooks applied. The kubelet main calls Verify and refuses to start unless
// every declared patch registered exactly as declared; test/build proves
// each declared Reach from the machine code.
package patched
