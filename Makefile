# critlet: upstream's kubelet with critlet's declared patches.
#
# make help lists the targets, from the "## " notes beside them below.
# local-up takes KUBELET=<binary> (default _output/bin/kubelet; e.g.
# _output/bin/kubelet-stock), KUBELET_FLAGS=<extra kubelet flags> and
# STATE_DIR=<directory> (default _output/local-node).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := all
# Each kubelet link needs a couple of GB and both cores; never build two at once.
.NOTPARALLEL:

# The binaries are always handed to go build, whose cache knows what changed.
.PHONY: help all kubelet kubelet-stock critlet-explain control-plane node-tools node-deps test-deps run local-up local-down local-status \
	package release test test-unit test-vet test-go test-patched-kubelet test-race test-cross test-build test-package test-e2e-node test-e2e-kubeadm \
	test-e2e-upstream test-e2e-upstream-conformance e2e-upstream-tools agnhost kubeadm-tools clean \
	cluster-deps critlet-cluster cluster-up cluster-down cluster-status test-e2e-cluster

KUBELET ?= _output/bin/kubelet
KUBELET_FLAGS ?=
STATE_DIR ?= _output/local-node
# Paths reach the recipes through the environment, never pasted into shell
# text: a space or a quote in them stays part of the path.
export STATE_DIR KUBELET

all: kubelet critlet-explain ## _output/bin/kubelet and _output/bin/critlet-explain (the default)

help: ## this list
	@grep -E '^[a-z0-9-]+:.*## ' Makefile | sed -E 's/^([a-z0-9-]+):.*## (.*)/\1\t\2/' | awk -F'\t' '{ printf "  make %-30s %s\n", $$1, $$2 }'

# $(call then-down,STATE,COMMAND) runs COMMAND, then always brings down the
# node under STATE (covering a run killed by its timeout); it fails if
# either failed.
then-down = status=0; $(2) || status=$$?; _output/bin/local-node down --state "$(1)" >/dev/null || status=1; exit $$status

kubelet: ## _output/bin/kubelet, patched
	hack/build-kubelet.sh patched

critlet-explain: ## _output/bin/critlet-explain: what a node would preempt for a pod
	go build -trimpath -o _output/bin/critlet-explain ./cmd/critlet-explain

kubelet-stock: ## _output/bin/kubelet-stock: upstream's, same module graph and flags
	hack/build-kubelet.sh stock

run: kubelet ## build _output/bin/kubelet and print its version
	_output/bin/kubelet --version

# Packages like the stock kubelet's (build/nfpm.yaml), built with nfpm and
# go-licenses from build/tools' own module graph; reproducible.
package: kubelet ## _output/package: .deb and .rpm of the patched kubelet (this architecture)
	hack/release.sh package _output/package

# Both architectures (arm64 cross-built), from a clean commit; the arm64
# kubelet is checked as test-build checks the amd64 one, without running it.
release: ## _output/release: tarball, .deb, .rpm for amd64 and arm64; SHA256SUMS
	hack/release.sh release _output/release
	RELEASE_KUBELET="$$(pwd)/_output/release-bin/linux-arm64/kubelet" go test -tags releasecheck -count=1 -v ./test/build/

# etcd and kube-apiserver, from go.mod's pinned graph.
control-plane: ## etcd and kube-apiserver, from go.mod's pinned graph
	hack/build-control-plane.sh

# The node's own small programs: the launcher and the pause process.
node-tools: ## the node's launcher (local-node) and pause process
	go build -trimpath -o _output/bin/local-node ./cmd/local-node
	CGO_ENABLED=0 go build -trimpath -ldflags=-s -o _output/bin/pause ./cmd/pause

# containerd, runc, CNI plugins and busybox-static from Debian, when absent.
node-deps: ## containerd, runc, CNI plugins, busybox-static from Debian, when absent
	hack/install-node-deps.sh

local-up: node-deps control-plane node-tools $(if $(filter _output/bin/kubelet-stock,$(KUBELET)),kubelet-stock,kubelet) ## build what is missing, start a local node with the patched kubelet
	_output/bin/local-node up --state "$$STATE_DIR" --kubelet "$$KUBELET" -- $(KUBELET_FLAGS)

local-down: node-tools ## stop the local node and remove what it created (logs are kept)
	_output/bin/local-node down --state "$$STATE_DIR"

local-status: node-tools ## the local node's components: running or not, and their logs
	_output/bin/local-node status --state "$$STATE_DIR"

# Every suite below but the conformance run, phase by phase, each phase's
# wall time measured (hack/test-phases.sh holds the phases; the table lands
# in _output/test-phases.tsv).
test: ## every suite below but the conformance run (the README's test command), each phase timed
	hack/test-phases.sh

# -trimpath, as the kubelet builds use, lets tests and builds share compiled
# dependencies in Go's cache.
# containerd (node-deps) is needed by a unit test too. Every suite of make
# test runs through hack/go-test.sh, which fails on a skipped test or a suite
# that ran nothing, and with CRITLET_TEST_NO_SKIP no test may skip for a tool
# the project installs (test/testenv).
export CRITLET_TEST_NO_SKIP := 1
test-unit: test-vet test-go test-patched-kubelet test-race test-cross ## vet, unit tests, upstream's pkg/kubelet patched, race detector, other code generators

test-vet: ## go vet, every build tag
	go vet -trimpath ./...
	go vet -trimpath -tags e2enode ./test/e2e_node/...
	go vet -trimpath -tags e2ekubeadm ./test/e2e_kubeadm/...
	go vet -trimpath -tags e2ecluster ./test/e2e_cluster/...
	go vet -trimpath -tags packagecheck ./test/package/
	go vet -trimpath -tags buildcheck,releasecheck ./test/build/

# test-deps too: the scratch-root tests run rpm and busybox-static, and a
# fresh machine has neither until test-cross (later in test-unit) asks.
test-go: node-deps test-deps ## the unit tests (containerd, rpm and busybox-static are needed by some)
	hack/go-test.sh unit -- $(UNIT_TESTS)

# Upstream's pkg/kubelet and pkg/kubelet/cm compiled as the patched kubelet
# compiles them (the overlay), their own unit tests and the patches'
# (overlay/k8s.io/kubernetes/pkg/kubelet/**/critlet_*_test.go), with every
# setting off and then on: about 3 minutes after the kubelet build.
test-patched-kubelet: ## upstream's pkg/kubelet and pkg/kubelet/cm tests and the patches' on the patched packages, settings off and on (TEST_RUN=regexp: those tests only)
	hack/test-patched-kubelet.sh $(if $(value TEST_RUN),-run '$(value TEST_RUN)')

# The race detector on the pure packages and on the handler, whose tests
# include its concurrent termination and the differential, compiled for
# amd64 v3: one compilation of the handler's kubelet dependencies (about
# 1,340 packages) serves both the race detector and the v3 code generator,
# which fuses multiply-adds where v1 cannot (the differential must hold
# there too; race instrumentation leaves arithmetic as it is).
test-race: ## the race detector, compiled for amd64 v3: the pure packages, the handler and its differential
	GOAMD64=v3 hack/go-test.sh race-v3 -- $(RACE_TESTS)

# Victims must be the stock kubelet's on every code generator: arm64 fuses
# multiply-adds where amd64 v1 cannot (amd64 v3 is test-race's). The
# selection's and the handler's tests again there, under user-mode
# emulation.
test-cross: test-deps ## the handler's and selection's tests on arm64 (emulated)
	GOARCH=arm64 hack/go-test.sh arm64 -- -exec qemu-aarch64-static $(CROSS_TESTS)

# Each suite's build flags and packages.
UNIT_TESTS := -trimpath ./...
RACE_TESTS := -trimpath -race ./pkg/victims/... ./pkg/settings/... ./pkg/termination/... ./pkg/kubeletstate/... ./overlay/k8s.io/kubernetes/pkg/kubelet/preemption/
CROSS_TESTS := -trimpath ./overlay/k8s.io/kubernetes/pkg/kubelet/preemption/ ./pkg/victims/ ./pkg/termination/

# qemu-user-static for the arm64 test binaries, from Debian, when absent.
test-deps: ## qemu-user-static and rpm from Debian, when absent
	hack/install-test-deps.sh

# Checks of the built binaries: version, flags, unpatched-build guard, the
# handler's presence in the machine code, and size.
test-build: kubelet kubelet-stock ## checks of the built binaries: version, flags, guard, machine code, size
	hack/go-test.sh build --stream -- -tags buildcheck -count=1 -timeout 45m ./test/build/

# The packages: metadata and files as dpkg and rpm read them, installs,
# upgrades, removals and swaps with the stock package in a scratch root, the
# command systemd would run beside kubeadm's drop-in, reproducibility.
test-package: test-deps package kubelet-stock ## the packages: metadata, files, installs, upgrades, swaps, reproducibility
	hack/go-test.sh package --stream -- -trimpath -tags packagecheck -count=1 -timeout 20m ./test/package/

# The node e2e suite: every scenario on a fresh node, once with each kubelet.
# The suite removes its node when it ends; the local-node down afterwards
# covers a run killed by its timeout. The table is in _output/e2e-node-report.md.
E2E_STATE := _output/e2e-node
test-e2e-node: node-deps control-plane node-tools kubelet kubelet-stock critlet-explain package ## the node e2e suite, each scenario on each kubelet (TEST_RUN=regexp: those tests only)
	$(call then-down,$(E2E_STATE),hack/go-test.sh e2e-node --stream -- -trimpath -tags e2enode -count=1 -timeout 90m ./test/e2e_node/ $(if $(value TEST_RUN),-run '$(value TEST_RUN)') -args -state "$$(pwd)/$(E2E_STATE)")

# kubeadm bootstraps a node whose kubelet is installed from its package
# (critlet's .deb; the stock binary with the same unit), in network and
# mount namespaces of its own; kubeadm and the rest of the control plane
# are built from the pinned module, their images imported into the node's
# containerd. The notes are in _output/e2e-kubeadm/report.md.
KUBEADM_STATE := _output/e2e-kubeadm
# Never etcd or kube-apiserver: make test builds these tools while a node
# runs those binaries (control-plane builds them).
kubeadm-tools: ## kubeadm, kubectl, kube-controller-manager, kube-scheduler
	hack/build-control-plane.sh kube-controller-manager kube-scheduler kubeadm kubectl

test-e2e-kubeadm: node-deps node-tools control-plane kubeadm-tools kubelet kubelet-stock package ## kubeadm init, scenarios and reset on a local node, with each kubelet
	$(call then-down,$(KUBEADM_STATE)/node,hack/go-test.sh e2e-kubeadm --stream -- -trimpath -tags e2ekubeadm -count=1 -timeout 30m ./test/e2e_kubeadm/ -args -state "$$(pwd)/$(KUBEADM_STATE)")

# Machines on this host, each booted by systemd-nspawn with systemd as
# PID 1, the packages installed with apt, kubeadm init and join
# (docs/cluster.md). The machine image is kept in _output/cluster-image.
CLUSTER_STATE ?= _output/cluster
E2E_CLUSTER_STATE := _output/e2e-cluster
export CLUSTER_STATE
CLUSTER_INPUTS := cluster-deps node-deps control-plane node-tools kubeadm-tools kubelet kubelet-stock package critlet-cluster

cluster-deps: ## systemd-nspawn, mmdebstrap and busybox-static from Debian, when absent
	hack/install-cluster-deps.sh

critlet-cluster: ## _output/bin/critlet-cluster, which makes and removes the machines
	go build -trimpath -o _output/bin/critlet-cluster ./cmd/critlet-cluster

cluster-up: $(CLUSTER_INPUTS) ## three machines, critlet on each, kubeadm init and join (docs/cluster.md)
	_output/bin/critlet-cluster up --state "$$CLUSTER_STATE"

cluster-down: critlet-cluster ## the machines and everything cluster-up made, removed
	_output/bin/critlet-cluster down --state "$$CLUSTER_STATE"

cluster-status: critlet-cluster ## the machines: running or powered off
	_output/bin/critlet-cluster status --state "$$CLUSTER_STATE"

test-e2e-cluster: $(CLUSTER_INPUTS) ## join, package swap, reboot and reset on three machines
	status=0; hack/go-test.sh e2e-cluster --stream -- -trimpath -tags e2ecluster -count=1 -timeout 30m ./test/e2e_cluster/ -args -state "$$(pwd)/$(E2E_CLUSTER_STATE)" || status=$$?; \
	_output/bin/critlet-cluster down --state "$(E2E_CLUSTER_STATE)/cluster" || status=1; exit $$status

# Upstream's own node e2e suite, compiled unmodified from the pinned module,
# run on each kubelet in a RuntimeOnly local node; ginkgo's runner (the
# conformance set runs in several processes) compiled from the module too,
# and for the conformance set agnhost, an image its tests run (CGO_ENABLED=0
# as upstream's image, hence a compilation of its whole graph of its own;
# CriticalPod's tests run pause only). The report compares the kubelets test
# by test; JUnit reports go beside it.
UPSTREAM_STATE := _output/e2e-upstream
e2e-upstream-tools: ## upstream's e2e_node test binary, ginkgo, the runner
	go test -c -trimpath -o _output/bin/e2e_node.test k8s.io/kubernetes/test/e2e_node
	go build -trimpath -o _output/bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
	go build -trimpath -o _output/bin/e2e-upstream ./test/e2e_upstream

agnhost: ## _output/bin/agnhost, from the pinned module, static (the conformance set's image)
	CGO_ENABLED=0 go build -trimpath -o _output/bin/agnhost k8s.io/kubernetes/test/images/agnhost

test-e2e-upstream: node-deps node-tools kubelet kubelet-stock e2e-upstream-tools ## upstream's CriticalPod node e2e tests on each kubelet
	$(call then-down,$(UPSTREAM_STATE)/node,_output/bin/e2e-upstream -focus critical -state "$(UPSTREAM_STATE)" -report _output/e2e-upstream-report.md)

test-e2e-upstream-conformance: node-deps node-tools kubelet kubelet-stock e2e-upstream-tools agnhost ## upstream's node conformance tests on each kubelet (hours)
	$(call then-down,$(UPSTREAM_STATE)/node,_output/bin/e2e-upstream -focus conformance -state "$(UPSTREAM_STATE)" -report _output/e2e-upstream-conformance-report.md)

clean: ## bring down every node this checkout runs, then remove _output
	for d in "$$STATE_DIR" $(E2E_STATE) $(KUBEADM_STATE)/node $(UPSTREAM_STATE)/node; do \
		if [[ -e "$$d/.critlet-local-node" ]]; then _output/bin/local-node down --state "$$d"; fi; \
	done
	if [[ -d _output ]]; then chmod -R u+w _output; fi
	rm -rf _output
