# critlet: upstream's kubelet with critlet's critical-pod admission handler.
#
#   make run            build _output/bin/kubelet and print its version
#   make test           unit tests, then checks of the built binaries
#   make kubelet        _output/bin/kubelet (patched)
#   make kubelet-stock  _output/bin/kubelet-stock (upstream, same module graph and flags)

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := kubelet
# Each kubelet link needs a couple of GB and both cores; never build two at once.
.NOTPARALLEL:

# The binaries are always handed to go build, whose cache knows what changed.
.PHONY: kubelet kubelet-stock run test test-unit test-build clean

kubelet:
	hack/build-kubelet.sh patched

kubelet-stock:
	hack/build-kubelet.sh stock

run: kubelet
	_output/bin/kubelet --version

test: test-unit test-build

# -trimpath, as the kubelet builds use, lets tests and builds share compiled
# dependencies in Go's cache.
test-unit:
	go vet -trimpath ./...
	go test -trimpath ./...
	# The race detector on the pure packages, and on the handler's concurrent
	# termination (race-compiling its kubelet dependencies costs about ten
	# minutes once, then comes from the cache).
	go test -race ./pkg/kubelet/preemption/victims/... ./pkg/kubelet/preemption/options/...
	go test -trimpath -race -run 'Termination|Parallelism|Replanning|Metrics' ./pkg/kubelet/preemption

# Checks of the built binaries: version, flags, unpatched-build guard, the
# handler's presence in the machine code, and size.
test-build: kubelet kubelet-stock
	go test -tags buildcheck -count=1 -timeout 45m -v ./test/build/

clean:
	if [[ -d _output ]]; then chmod -R u+w _output; fi
	rm -rf _output
