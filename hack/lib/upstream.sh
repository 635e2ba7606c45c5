# shellcheck shell=bash
# The pinned upstream module as the patched build sees it.
#
# go build -overlay refuses to replace files inside GOMODCACHE, so the build
# points k8s.io/kubernetes at a pristine copy of the module outside it, through
# a modfile generated from go.mod. Both kubelets build from that modfile, so
# they share one module graph and one build cache.

UPSTREAM_MODULE=k8s.io/kubernetes

# upstream::prepare ROOT: the steps every build from the pinned module takes:
# sets UPSTREAM_VERSION, makes the pristine copy (UPSTREAM_COPY) under
# ROOT/_output/upstream and the modfile ROOT/_output/build/go.mod, set in
# BUILD_MODFILE.
upstream::prepare() {
  local root=$1
  UPSTREAM_VERSION=$(upstream::version) || return 1
  upstream::copy "$UPSTREAM_VERSION" "${root}/_output/upstream" || return 1
  upstream::modfile "$UPSTREAM_COPY" "${root}/_output/build" || return 1
  BUILD_MODFILE="${root}/_output/build/go.mod"
}

# upstream::version: prints the k8s.io/kubernetes version go.mod requires.
upstream::version() {
  local v
  v=$(go list -m -f '{{.Version}}' "$UPSTREAM_MODULE") || {
    echo "upstream: cannot read the $UPSTREAM_MODULE requirement from go.mod" >&2
    return 1
  }
  [[ -n $v ]] || { echo "upstream: go.mod does not require $UPSTREAM_MODULE" >&2; return 1; }
  echo "$v"
}

# upstream::date: prints the publication time of the required k8s.io/kubernetes
# release, as recorded by the module proxy.
upstream::date() {
  local d
  d=$(go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$UPSTREAM_MODULE") || {
    echo "upstream: cannot read the time of the $UPSTREAM_MODULE release" >&2
    return 1
  }
  echo "$d"
}

# upstream::copy VERSION OUTDIR: sets UPSTREAM_COPY to an absolute path of a
# pristine copy of the module, made once per version. The copy's files stay
# read-only like the module cache's (nothing may edit them); its directories
# are made writable so that it can be deleted.
upstream::copy() {
  local version=$1 outdir=$2
  local copy="${outdir}/kubernetes@${version}"
  local stamp="${copy}.stamp"
  # The go.sum hash names the exact module contents the copy was made from.
  local want
  want=$(grep -E "^${UPSTREAM_MODULE//./\\.} ${version//./\\.} h1:" go.sum) || {
    echo "upstream: go.sum has no checksum for ${UPSTREAM_MODULE} ${version}" >&2
    return 1
  }
  if [[ -d $copy && -f $stamp && $(<"$stamp") == "$want" ]]; then
    UPSTREAM_COPY=$(cd "$copy" && pwd)
    return 0
  fi

  go mod download "${UPSTREAM_MODULE}@${version}" || {
    echo "upstream: downloading ${UPSTREAM_MODULE}@${version} failed" >&2
    return 1
  }
  local src
  src=$(go list -m -f '{{.Dir}}' "$UPSTREAM_MODULE") && [[ -n $src && -f $src/go.mod ]] || {
    echo "upstream: cannot locate ${UPSTREAM_MODULE}@${version} in the module cache" >&2
    return 1
  }

  echo "copying ${UPSTREAM_MODULE}@${version} out of the module cache to ${copy}" >&2
  mkdir -p "$outdir"
  # Remove copies of other versions and any half-made copy of this one.
  local old
  for old in "$outdir"/kubernetes@* "$outdir"/.kubernetes@*.tmp; do
    [[ -e $old ]] || continue
    [[ -d $old ]] && chmod -R u+w "$old"
    rm -rf "$old"
  done
  local tmp="${outdir}/.kubernetes@${version}.tmp"
  cp -R "$src" "$tmp"
  find "$tmp" -type d -exec chmod u+w {} +
  mv "$tmp" "$copy"
  echo "$want" >"$stamp"
  UPSTREAM_COPY=$(cd "$copy" && pwd)
}

# upstream::modfile COPY OUTDIR: writes OUTDIR/go.mod and OUTDIR/go.sum: this
# module's go.mod and go.sum with k8s.io/kubernetes replaced by COPY; run
# from the module root. Files are
# rewritten only when their contents change.
upstream::modfile() {
  local copy=$1 outdir=$2
  mkdir -p "$outdir"
  # Temporary names of this run's own: make test builds in two lanes, and
  # both may prepare at once.
  local mod_tmp sum_tmp
  mod_tmp=$(mktemp "${outdir}/.go.mod.XXXXXX") && sum_tmp=$(mktemp "${outdir}/.go.sum.XXXXXX") || {
    echo "upstream: cannot make temporary files in ${outdir}" >&2
    return 1
  }
  cp go.mod "$mod_tmp"
  # Relative to the module root when the copy is inside it: the binaries
  # record the replacement in their build information, and an absolute path
  # would make two checkouts of one commit build different bytes.
  local target=$copy
  if [[ $copy == "$PWD"/* ]]; then
    target="./${copy#"$PWD"/}"
  fi
  go mod edit -replace="${UPSTREAM_MODULE}=${target}" "$mod_tmp" || {
    rm -f "$mod_tmp" "$sum_tmp"
    echo "upstream: generating ${outdir}/go.mod failed" >&2
    return 1
  }
  cp go.sum "$sum_tmp"
  upstream::replace_if_changed "$mod_tmp" "${outdir}/go.mod" &&
    upstream::replace_if_changed "$sum_tmp" "${outdir}/go.sum"
}

# upstream::replace_if_changed TMP FILE: FILE gets TMP's contents by rename
# (readers see the old file or the new, whole), or keeps its own when they
# are the same; TMP is gone either way.
upstream::replace_if_changed() {
  local tmp=$1 file=$2
  if cmp -s "$tmp" "$file"; then
    rm -f "$tmp"
  else
    chmod 0644 "$tmp" && mv "$tmp" "$file" || {
      rm -f "$tmp"
      echo "upstream: replacing ${file} failed" >&2
      return 1
    }
  fi
}
