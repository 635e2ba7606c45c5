#!/usr/bin/env bash
# Packages critlet's kubelet as the stock kubelet package is packaged.
#
#   hack/release.sh package OUTDIR   # .deb and .rpm for this machine's
#                                    # architecture, from _output/bin/kubelet
#   hack/release.sh release OUTDIR   # for amd64 and arm64: the kubelet (arm64
#                                    # cross-built), .deb, .rpm, a tarball each,
#                                    # and SHA256SUMS
#
# Everything is reproducible: the same commit gives byte-identical files.
# Times are the commit's (SOURCE_DATE_EPOCH), owners root, modes fixed, and
# the archives are written in name order without build-host details.
# CRITLET_PKG_RELEASE (default 1) is the packages' revision.
script_name=release
# shellcheck source=hack/lib/init.sh
source "$(dirname "$0")/lib/init.sh"

mode=${1:-}
out=${2:-}
case $mode in
  package | release) ;;
  *)
    echo "usage: $0 package|release OUTDIR" >&2
    exit 2
    ;;
esac
[[ -n $out ]] || fail "no output directory given"

bin=${root}/_output/bin
tools=${root}/build/tools

# release::tools: nfpm and go-licenses, from build/tools' own module graph.
# go-licenses finds the standard library through the GOROOT it was built
# with, which -trimpath would remove: it then silently saves nothing.
release::tools() {
  echo "release: building nfpm and go-licenses (build/tools)" >&2
  (cd "$tools" && go build -trimpath -o "$bin/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm &&
    go build -o "$bin/go-licenses" github.com/google/go-licenses/v2) ||
    fail "building the release tools failed"
}

# release::versions: UPSTREAM_VERSION, STAMPED_VERSION (the kubelet's),
# PKG_VERSION (the packages': the commit's time orders builds of one
# upstream release; a work tree with uncommitted changes adds a mark per
# build, release::packages) and SOURCE_DATE_EPOCH.
release::versions() {
  UPSTREAM_VERSION=$(upstream::version) || fail "cannot read the upstream version"
  version::ldflags patched "$UPSTREAM_VERSION" "" || fail "cannot stamp a version"
  local stamp
  stamp=$(TZ=UTC git show -s --date=format-local:'%Y%m%d%H%M%S' --format=%cd HEAD)
  PKG_VERSION="${UPSTREAM_VERSION#v}+critlet.${stamp}.${GIT_SHORT}"
  if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
    SOURCE_DATE_EPOCH=$(git show -s --format=%ct HEAD)
  fi
  export SOURCE_DATE_EPOCH
}

# release::licenses ARCH DIR: the license files (and, for reciprocal
# licenses, the source) of every package linked into the kubelet, as
# go-licenses gathers them from the module graph of the patched build.
release::licenses() {
  local arch=$1 dir=$2
  rm -rf "$dir"
  # go.mod's graph: the patched build's differs only by critlet's own
  # packages, which the kubelet's module list check in test/package covers.
  # go-licenses asks the network for each module's URL, which only reaches
  # the module proxy here: its warnings about that are dropped, the rest kept.
  if ! GOFLAGS= GOOS=linux GOARCH=$arch CGO_ENABLED=1 \
    "$bin/go-licenses" save ./cmd/kubelet --save_path "$dir" \
    2> >(grep -v -e 'Error discovering license URL' -e "contains non-Go code that can't be inspected" -e '\.s$' >&2); then
    fail "go-licenses could not gather the licenses of the kubelet's dependencies (linux/$arch)"
  fi
  [[ -f $dir/k8s.io/kubernetes/LICENSE ]] || fail "go-licenses saved no license for k8s.io/kubernetes in $dir"
  find "$dir" -type d -exec chmod 0755 {} +
  find "$dir" -type f -exec chmod 0644 {} +
}

# release::packages ARCH KUBELET LICENSES OUTDIR: the .deb and the .rpm.
# From a work tree with uncommitted changes their version says so, and
# differs whenever what they package does (version::dirty_suffix): the
# commit's version alone would name different contents.
release::packages() {
  local arch=$1 kubelet=$2 licenses=$3 dir=$4
  mkdir -p "$dir"
  local version=$PKG_VERSION
  if [[ $GIT_TREE_STATE != clean ]]; then
    local suffix
    suffix=$(version::dirty_suffix "$kubelet" "$licenses" build LICENSE README.md) ||
      fail "cannot version the packages of a work tree with uncommitted changes"
    version+=$suffix
    echo "release: the work tree has uncommitted changes: the packages are version ${version}" >&2
  fi
  local format
  for format in deb rpm; do
    CRITLET_ARCH=$arch CRITLET_KUBELET=$kubelet CRITLET_LICENSES=$licenses \
      CRITLET_PKG_VERSION=$version CRITLET_PKG_RELEASE=${CRITLET_PKG_RELEASE:-1} \
      CRITLET_UPSTREAM_VERSION=${UPSTREAM_VERSION#v} \
      "$bin/nfpm" package --config build/nfpm.yaml --packager "$format" --target "$dir/" >&2 ||
      fail "nfpm could not build the $format package for $arch"
  done
}

# release::tarball ARCH KUBELET LICENSES OUTDIR: critlet-<version>-linux-<arch>.tar.gz.
release::tarball() {
  local arch=$1 kubelet=$2 licenses=$3 dir=$4
  local stage
  stage=$(mktemp -d "${root}/_output/release-stage.XXXXXX")
  local top=${stage}/critlet
  install -D -m 0755 "$kubelet" "$top/bin/kubelet"
  install -D -m 0644 build/systemd/kubelet.service "$top/systemd/kubelet.service"
  install -D -m 0644 build/systemd/20-critlet.conf "$top/systemd/kubelet.service.d/20-critlet.conf"
  install -D -m 0644 build/default/kubelet "$top/default/kubelet"
  install -D -m 0644 build/default/critlet "$top/default/critlet"
  install -D -m 0644 LICENSE "$top/LICENSE"
  install -D -m 0644 README.md "$top/README.md"
  cp -R "$licenses" "$top/LICENSES"
  local name="critlet-${STAMPED_VERSION}-linux-${arch}.tar.gz"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@${SOURCE_DATE_EPOCH}" --mode='u+w,go-w,a+rX' \
    -C "$stage" -cf - critlet | gzip -9 -n >"$dir/$name"
  rm -rf "$stage"
}

# release::package_inputs ARCH: a digest of what make package's packages
# are made of: the kubelet (contents and the time the dirty version reads),
# the versions, the packaging files and tools, and the module graph the
# licenses come from.
release::package_inputs() {
  local arch=$1
  (
    set -o pipefail
    printf 'arch %s version %s release %s tree %s\n' "$arch" "$PKG_VERSION" "${CRITLET_PKG_RELEASE:-1}" "$GIT_TREE_STATE"
    TZ=UTC date -r "$bin/kubelet" +%s.%N
    sha256sum <"$bin/kubelet"
    find build hack/release.sh hack/lib LICENSE README.md go.mod go.sum -type f -print0 |
      LC_ALL=C sort -z | xargs -0 -r sha256sum --
  ) | sha256sum | cut -d' ' -f1
}

release::versions
mkdir -p "$out"
out=$(cd "$out" && pwd)

case $mode in
  package)
    arch=$(go env GOARCH)
    [[ -x $bin/kubelet ]] || fail "$bin/kubelet is missing: make kubelet"
    # make test asks for the packages before each suite that reads them,
    # and a suite may be reading them then: packages built from the same
    # inputs are left as they are.
    stamp=${out}/.inputs
    inputs=$(release::package_inputs "$arch") || fail "cannot digest the packages' inputs"
    if [[ -f $stamp && $(<"$stamp") == "$inputs" && -x $bin/nfpm && -x $bin/go-licenses ]] &&
      compgen -G "$out/kubelet-critlet_*_${arch}.deb" >/dev/null && compgen -G "$out/kubelet-critlet-*.rpm" >/dev/null; then
      echo "release: the packages in $out are up to date" >&2
      exit 0
    fi
    # Earlier builds' packages would stand beside this one's.
    rm -f "$stamp" "$out"/kubelet-critlet_*.deb "$out"/kubelet-critlet-*.rpm
    release::tools
    release::licenses "$arch" "${root}/_output/release-licenses/${arch}"
    release::packages "$arch" "$bin/kubelet" "${root}/_output/release-licenses/${arch}" "$out"
    printf '%s\n' "$inputs" >"$stamp"
    ;;
  release)
    if [[ $GIT_TREE_STATE != clean && -z ${CRITLET_ALLOW_DIRTY:-} ]]; then
      fail "the work tree has uncommitted changes: a release is built from a commit (CRITLET_ALLOW_DIRTY=1 overrides)"
    fi
    release::tools
    hack/install-release-deps.sh
    rm -f "$out"/kubelet-critlet_*.deb "$out"/kubelet-critlet-*.rpm "$out"/critlet-*.tar.gz "$out/SHA256SUMS"
    for arch in amd64 arm64; do
      kubelet=${root}/_output/release-bin/linux-${arch}/kubelet
      GOARCH=$arch hack/build-kubelet.sh patched "$kubelet" || fail "building the linux/$arch kubelet failed"
      licenses=${root}/_output/release-licenses/${arch}
      release::licenses "$arch" "$licenses"
      release::packages "$arch" "$kubelet" "$licenses" "$out"
      release::tarball "$arch" "$kubelet" "$licenses" "$out"
    done
    (cd "$out" && sha256sum -- *.tar.gz *.deb *.rpm >SHA256SUMS)
    ;;
esac
echo "release: $(cd "$out" && ls | tr '\n' ' ')in $out" >&2
