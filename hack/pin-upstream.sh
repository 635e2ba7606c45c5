#!/usr/bin/env bash
# Pins the k8s.io/kubernetes module and every one of its ./staging modules.
#
# Upstream's go.mod replaces its staging modules with local directories, which
# a dependent module cannot use; each of them is published as k8s.io/<name> at
# v0.<minor>.<patch>. This script reads upstream's own replace block, so the
# list never drifts from the release it pins.
#
#   hack/pin-upstream.sh            # the version below
#   KUBE_VERSION=v1.37.3 hack/pin-upstream.sh
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}

cd "$(dirname "$0")/.."

if [[ ! $KUBE_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "pin-upstream: KUBE_VERSION must look like v1.N.M, got '$KUBE_VERSION'" >&2
  exit 2
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

upstream_mod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
if [[ -z $upstream_mod || ! -f $upstream_mod ]]; then
  echo "pin-upstream: could not download k8s.io/kubernetes@${KUBE_VERSION}" >&2
  exit 1
fi

mapfile -t staging < <(sed -n 's#^\t\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$upstream_mod")
if (( ${#staging[@]} == 0 )); then
  echo "pin-upstream: found no ./staging replaces in $upstream_mod" >&2
  exit 1
fi

# Drop the replaces this script wrote last time, then write the new set.
args=(-require="k8s.io/kubernetes@${KUBE_VERSION}")
while read -r mod; do
  args+=(-dropreplace="$mod")
done < <(sed -n 's#^\(replace \)\{0,1\}[[:space:]]*\(k8s\.io/[^ ]*\) => k8s\.io/.*#\2#p' go.mod)
for mod in "${staging[@]}"; do
  args+=(-replace="${mod}=${mod}@${staging_version}")
done
go mod edit "${args[@]}"
go mod tidy
echo "pinned k8s.io/kubernetes ${KUBE_VERSION} and ${#staging[@]} staging modules at ${staging_version}"
