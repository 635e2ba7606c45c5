// Package build checks the kubelet binaries that 'make kubelet' and
// 'make kubelet-stock' produce: version stamp, flags, the unpatched-build
// guard, that the machine code runs critlet's handler, and binary size.
//
// The checks need the built binaries and a full kubelet build of their own,
// so they sit behind a build tag: 'make test-build' runs them with
// -tags buildcheck, and plain 'go test ./...' skips them.
package build
