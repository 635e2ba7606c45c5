#!/usr/bin/env bash
# Builds a kubelet from the pinned upstream module.
#
#   hack/build-kubelet.sh patched   # _output/bin/kubelet: critlet's packages swapped in
#   hack/build-kubelet.sh stock     # _output/bin/kubelet-stock: upstream unchanged
#
# Both use the same modfile, flags and build cache, so they differ only by the
# overlay and the version stamp. Go's cache decides what to recompile; an
# unchanged tree relinks nothing.
set -euo pipefail
shopt -s inherit_errexit

flavor=${1:-}
case $flavor in
  patched) out=_output/bin/kubelet ;;
  stock) out=_output/bin/kubelet-stock ;;
  *)
    echo "usage: $0 patched|stock" >&2
    exit 2
    ;;
esac

cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=hack/lib/upstream.sh
source hack/lib/upstream.sh
# shellcheck source=hack/lib/version.sh
source hack/lib/version.sh

fail() {
  echo "build-kubelet: $*" >&2
  exit 1
}

upstream::prepare "$root" || fail "preparing the pinned upstream module failed"
version::ldflags "$flavor" "$UPSTREAM_VERSION" "$(upstream::date)"

args=(
  -modfile="$BUILD_MODFILE"
  -trimpath
  # The commit is stamped below; Go's own VCS stamping would only add a second,
  # git-dependent copy of it.
  -buildvcs=false
  -ldflags="$LDFLAGS"
  -o "$out"
)
if [[ $flavor == patched ]]; then
  overlay="${root}/_output/build/overlay.json"
  go run ./hack/gen-overlay -upstream "$UPSTREAM_COPY" -repo "$root" -o "$overlay" ||
    fail "generating the overlay failed"
  args+=(-overlay="$overlay")
  target=./cmd/kubelet
else
  target=${UPSTREAM_MODULE}/cmd/kubelet
fi

mkdir -p "$(dirname "$out")"
echo "building $out ($STAMPED_VERSION)" >&2
go build "${args[@]}" "$target" || fail "go build of $target failed"

# Ship nothing that does not report the version just stamped: an unstamped
# build says v0.0.0-master.
want="Kubernetes ${STAMPED_VERSION}"
if ! got=$("$out" --version 2>&1) || [[ $got != "$want" ]]; then
  rm -f "$out"
  fail "$out --version printed '${got}', want '${want}'; binary removed"
fi
echo "$out: $got" >&2
