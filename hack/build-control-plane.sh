#!/usr/bin/env bash
# Builds the local node's control plane from this module's pinned graph:
#
#   _output/bin/kube-apiserver   k8s.io/kubernetes/cmd/kube-apiserver (upstream, unchanged)
#   _output/bin/etcd             go.etcd.io/etcd/server/v3 (the version the apiserver's client pins)
#
# and, when named (the kubeadm suite's), kube-controller-manager,
# kube-scheduler and kubeadm from k8s.io/kubernetes/cmd, unchanged.
#
# All are `tool` requirements of go.mod, so `go mod tidy` keeps their
# dependencies and they cannot drift from the kubelet's. They build from the
# same generated modfile as the kubelets and so share their build cache.
script_name=build-control-plane
# shellcheck source=hack/lib/init.sh
source "$(dirname "$0")/lib/init.sh"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(kube-apiserver etcd)
fi

upstream::prepare "$root" || fail "preparing the pinned upstream module failed"
mkdir -p _output/bin

for target in "${targets[@]}"; do
  out=_output/bin/${target}
  case $target in
    kube-apiserver | kube-controller-manager | kube-scheduler)
      pkg=${UPSTREAM_MODULE}/cmd/${target}
      version::ldflags stock "$UPSTREAM_VERSION" "$(upstream::date)"
      want="Kubernetes ${STAMPED_VERSION}"
      ;;
    kubectl)
      pkg=${UPSTREAM_MODULE}/cmd/kubectl
      version::ldflags stock "$UPSTREAM_VERSION" "$(upstream::date)"
      want="Client Version: ${STAMPED_VERSION}"
      ;;
    kubeadm)
      pkg=${UPSTREAM_MODULE}/cmd/kubeadm
      version::ldflags stock "$UPSTREAM_VERSION" "$(upstream::date)"
      want="${STAMPED_VERSION}"
      ;;
    etcd)
      pkg=go.etcd.io/etcd/server/v3
      etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) ||
        fail "go.mod does not require go.etcd.io/etcd/server/v3"
      LDFLAGS=
      want="etcd Version: ${etcd_version#v}"
      ;;
    *) fail "unknown target '$target' (want kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kubeadm or kubectl)" ;;
  esac
  # go build says nothing until it is done; say what to expect.
  echo "building $out: a few minutes on two cores with a cold build cache (less after the kubelet, which shares most packages), seconds when nothing changed" >&2
  go build -modfile="$BUILD_MODFILE" -trimpath -buildvcs=false \
    -ldflags="$LDFLAGS" -o "$out" "$pkg" || fail "go build of $pkg failed"
  # A binary that does not report the pinned version is not the one the
  # local node was tested with.
  version_flag=--version
  [[ $target == kubeadm ]] && version_flag="version -o short"
  [[ $target == kubectl ]] && version_flag="version --client"
  # shellcheck disable=SC2086 # version_flag is one or three words
  if ! got=$("$out" $version_flag 2>&1) || [[ $got != *"$want"* ]]; then
    rm -f "$out"
    fail "$out $version_flag printed '${got}', want '${want}'; binary removed"
  fi
  echo "$out: ${got%%$'\n'*}" >&2
done
