#!/usr/bin/env bash
# Builds a kubelet from the pinned upstream module.
#
#   hack/build-kubelet.sh patched   # _output/bin/kubelet: critlet's packages swapped in
#   hack/build-kubelet.sh stock     # _output/bin/kubelet-stock: upstream unchanged
#   GOARCH=arm64 hack/build-kubelet.sh patched OUT   # cross-built, to OUT
#
# The kubelet links the C library as upstream's release builds do (cgo), so
# another architecture is built with Debian's cross compiler for it and its
# --version run under qemu-user with that architecture's C library
# (hack/install-release-deps.sh installs both).
#
# Both use the same modfile, flags and build cache, so they differ only by the
# overlay and the version stamp. Go's cache decides what to recompile; an
# unchanged tree relinks nothing.
script_name=build-kubelet
# shellcheck source=hack/lib/init.sh
source "$(dirname "$0")/lib/init.sh"

flavor=${1:-}
case $flavor in
  patched) out=${2:-_output/bin/kubelet} ;;
  stock) out=${2:-_output/bin/kubelet-stock} ;;
  *)
    echo "usage: $0 patched|stock [OUTPUT]" >&2
    exit 2
    ;;
esac

host_arch=$(go env GOHOSTARCH)
arch=$(go env GOARCH)
run=()
if [[ $arch != "$host_arch" ]]; then
  case $arch in
    arm64) triplet=aarch64-linux-gnu qemu=qemu-aarch64-static ;;
    *) fail "no cross toolchain known for GOARCH=$arch (known: arm64)" ;;
  esac
  for tool in "${triplet}-gcc" "$qemu"; do
    command -v "$tool" >/dev/null || fail "$tool is missing for GOARCH=$arch: run hack/install-release-deps.sh"
  done
  export CGO_ENABLED=1 CC="${triplet}-gcc"
  run=("$qemu" -L "/usr/${triplet}")
fi

upstream::prepare "$root" || fail "preparing the pinned upstream module failed"
version::ldflags "$flavor" "$UPSTREAM_VERSION" "$(upstream::date)"

# Built beside its place and moved there only when it differs: make test
# asks for the kubelets again while suites read them, and a rebuild that
# changes nothing must leave the file (and its time, which the packages'
# version reads) as it was.
mkdir -p "$(dirname "$out")"
tmpdir=$(mktemp -d "$(dirname "$out")/.$(basename "$out").XXXXXX") || fail "cannot make a temporary directory beside $out"
trap 'rm -rf "$tmpdir"' EXIT
built=${tmpdir}/$(basename "$out")

args=(
  -modfile="$BUILD_MODFILE"
  -trimpath
  # The commit is stamped below; Go's own VCS stamping would only add a second,
  # git-dependent copy of it.
  -buildvcs=false
  -ldflags="$LDFLAGS"
  -o "$built"
)
if [[ $flavor == patched ]]; then
  overlay="${root}/_output/build/overlay.json"
  GOARCH=$host_arch go run ./hack/gen-overlay -upstream "$UPSTREAM_COPY" -repo "$root" -gen "${root}/_output/build/overlay" -o "$overlay" ||
    fail "generating the overlay failed"
  # Files critlet adds to upstream packages carry this tag (pkg/patched.BuildTag).
  args+=(-overlay="$overlay" -tags=critlet_patch)
  target=./cmd/kubelet
else
  target=${UPSTREAM_MODULE}/cmd/kubelet
fi

# go build says nothing until it is done; say what to expect.
echo "building $out ($STAMPED_VERSION, linux/$arch): about 10 minutes on two cores with a cold build cache, seconds when nothing changed" >&2
go build "${args[@]}" "$target" || fail "go build of $target failed"

# Ship nothing that does not report the version just stamped: an unstamped
# build says v0.0.0-master.
want="Kubernetes ${STAMPED_VERSION}"
if ! got=$("${run[@]}" "$built" --version 2>&1) || [[ $got != "$want" ]]; then
  rm -f "$out"
  fail "$out --version printed '${got}', want '${want}'; binary removed"
fi
if cmp -s "$built" "$out"; then
  echo "$out: unchanged, $got" >&2
else
  chmod 0755 "$built" && mv -f "$built" "$out" || fail "cannot move the built kubelet to $out"
  echo "$out: $got" >&2
fi
