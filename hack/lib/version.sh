# shellcheck shell=bash
# Version stamping for the kubelet binaries, with the same -X variables as
# upstream's build so `kubelet --version`, the node's kubeletVersion and the
# version metric all report the upstream release.
#
# The patched kubelet reports <upstream>+critlet.<commit>: semver build
# metadata, so the version still parses and compares equal to the upstream
# release. Whether the tree was dirty goes only into gitTreeState, keeping the
# version valid semver. buildDate is the commit's time for the patched kubelet
# and the release's time for the stock one (SOURCE_DATE_EPOCH overrides both),
# never the wall clock, so rebuilding unchanged sources relinks nothing.

# version::parse_upstream VERSION: sets UPSTREAM_MAJOR, UPSTREAM_MINOR.
version::parse_upstream() {
  local v=$1
  if [[ ! $v =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]]; then
    echo "version: upstream version '$v' is not a release version vX.Y.Z[-pre]" >&2
    return 1
  fi
  UPSTREAM_MAJOR=${BASH_REMATCH[1]}
  UPSTREAM_MINOR=${BASH_REMATCH[2]}
  # Upstream marks the minor of a pre-release with a trailing "+".
  if [[ -n ${BASH_REMATCH[4]} ]]; then
    UPSTREAM_MINOR+="+"
  fi
}

# version::git_state: sets GIT_COMMIT, GIT_SHORT, GIT_TREE_STATE, GIT_DATE
# from the repository in the current directory; fails outside a checkout with
# a commit, since an unstamped kubelet must never be built.
version::git_state() {
  if ! GIT_COMMIT=$(git rev-parse --verify --quiet 'HEAD^{commit}'); then
    echo "version: cannot stamp the kubelet: $(pwd) is not a git checkout with a commit" >&2
    return 1
  fi
  GIT_SHORT=${GIT_COMMIT:0:12}
  local status
  if ! status=$(git status --porcelain); then
    echo "version: git status failed" >&2
    return 1
  fi
  if [[ -z $status ]]; then
    GIT_TREE_STATE=clean
  else
    GIT_TREE_STATE=dirty
  fi
  GIT_DATE=$(TZ=UTC git show -s --date=format-local:'%Y-%m-%dT%H:%M:%SZ' --format=%cd HEAD)
}

# version::ldflags FLAVOR UPSTREAM_VERSION UPSTREAM_DATE: sets LDFLAGS to the
# -ldflags value for FLAVOR "patched" (this repository's commit) or "stock"
# (the upstream release, published at UPSTREAM_DATE), and STAMPED_VERSION to
# the gitVersion it stamps.
version::ldflags() {
  local flavor=$1 upstream=$2 upstream_date=$3
  version::parse_upstream "$upstream" || return 1

  local build_date
  local -a vars=("gitMajor=${UPSTREAM_MAJOR}" "gitMinor=${UPSTREAM_MINOR}")
  case $flavor in
    patched)
      version::git_state || return 1
      STAMPED_VERSION="${upstream}+critlet.${GIT_SHORT}"
      build_date=$GIT_DATE
      vars+=("gitCommit=${GIT_COMMIT}" "gitTreeState=${GIT_TREE_STATE}")
      ;;
    stock)
      # The module does not record upstream's commit; its sources are the
      # release checksummed in go.sum, hence clean.
      STAMPED_VERSION=${upstream}
      build_date=$upstream_date
      vars+=("gitTreeState=clean")
      ;;
    *)
      echo "version: unknown flavor '$flavor'" >&2
      return 1
      ;;
  esac
  if [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
    build_date=$(date -u -d "@${SOURCE_DATE_EPOCH}" +'%Y-%m-%dT%H:%M:%SZ') || {
      echo "version: bad SOURCE_DATE_EPOCH '${SOURCE_DATE_EPOCH}'" >&2
      return 1
    }
  fi
  if [[ ! $build_date =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]]; then
    echo "version: no usable build date (got '${build_date}')" >&2
    return 1
  fi
  vars+=("buildDate=${build_date}" "gitVersion=${STAMPED_VERSION}")

  local -a flags=()
  local kv
  for kv in "${vars[@]}"; do
    flags+=("-X 'k8s.io/component-base/version.${kv}'" "-X 'k8s.io/client-go/pkg/version.${kv}'")
  done
  LDFLAGS="${flags[*]}"
}

# version::dirty_suffix KUBELET PATH...: what a package built from a work
# tree with uncommitted changes adds to the commit's package version, so
# that two different builds never share a version: ".dirty.<time>.<hash>",
# <time> the kubelet's modification time (UTC), so that a later kubelet sorts
# later, and <hash> 12 hex digits of the SHA-256 of the kubelet's contents
# and of each PATH, a file (its name and contents) or a directory (the
# names under it and their contents): the same files give the same version. Both dpkg and rpm sort it after the
# commit's own version and before any later commit's.
version::dirty_suffix() {
  local kubelet=$1
  shift
  local time sums
  if ! time=$(TZ=UTC date -r "$kubelet" +%Y%m%d%H%M%S); then
    echo "version: cannot read the modification time of $kubelet" >&2
    return 1
  fi
  if ! sums=$(
    set -o pipefail
    sha256sum <"$kubelet"
    local path
    for path in "$@"; do
      if [[ -d $path ]]; then
        (cd "$path" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum --) || exit 1
      elif [[ -f $path ]]; then
        local sum
        sum=$(sha256sum <"$path") || exit 1
        printf '%s  %s\n' "${sum%% *}" "${path##*/}"
      else
        echo "version: $path is neither a file nor a directory" >&2
        exit 1
      fi
    done
  ); then
    echo "version: cannot checksum the package's files ($kubelet $*)" >&2
    return 1
  fi
  echo ".dirty.${time}.$(sha256sum <<<"$sums" | cut -c1-12)"
}

