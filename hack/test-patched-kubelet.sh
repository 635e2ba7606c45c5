#!/usr/bin/env bash
# Tests upstream's pkg/kubelet and pkg/kubelet/cm as the patched build
# compiles them: critlet's files added and its hooks applied (the overlay),
# with each patch's own tests (overlay/k8s.io/kubernetes/pkg/kubelet/**/critlet_*_test.go)
# beside upstream's. The packages are tested twice, with every setting off
# and with every setting on, so upstream's own tests of the hooked
# functions pass both ways.
#
#   hack/test-patched-kubelet.sh [GO_TEST_ARGS...]   # e.g. -run TestCritlet
script_name=test-patched-kubelet
# shellcheck source=hack/lib/init.sh
source "$(dirname "$0")/lib/init.sh"

upstream::prepare "$root" || fail "preparing the pinned upstream module failed"
overlay="${root}/_output/build/overlay.json"
go run ./hack/gen-overlay -upstream "$UPSTREAM_COPY" -repo "$root" -gen "${root}/_output/build/overlay" -o "$overlay" ||
  fail "generating the overlay failed"

args=(-modfile="$BUILD_MODFILE" -trimpath -buildvcs=false -overlay="$overlay" -tags=critlet_patch -count=1 "$@"
  "${UPSTREAM_MODULE}/pkg/kubelet" "${UPSTREAM_MODULE}/pkg/kubelet/cm")
# The settings the patches read, as the kubelet main would publish them
# (the patches' test files publish what these variables say).
on=(CRITLET_STATIC_POD_READMISSION=true CRITLET_PREEMPTION_RESUME=true CRITLET_PREEMPTION_OUTAGE_RECOVERY=true CRITLET_PREEMPTION_DEVICES=true CRITLET_DEVICE_READMISSION=true)
hack/go-test.sh patched-kubelet-off -- "${args[@]}"
env "${on[@]}" hack/go-test.sh patched-kubelet-on -- "${args[@]}"
