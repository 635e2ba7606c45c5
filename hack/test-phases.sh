#!/usr/bin/env bash
# make test: every suite, one phase after another, each phase's wall time
# measured. The table goes to standard output at the end (and when a phase
# fails) and to _output/test-phases.tsv; docs/test-time.md keeps the
# measured tables. A phase is make targets: the builds a suite needs are
# phases of their own, so a suite's time is its own.
#
#   hack/test-phases.sh            # every phase
#   hack/test-phases.sh vet unit   # the named phases only, in table order
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/.."

# name: make targets. The order is make test's.
phases=(
  "tools: node-deps test-deps"
  "vet: test-vet"
  "unit: test-go"
  "patched: test-patched-kubelet"
  "race: test-race"
  "cross: test-cross"
  "kubelets: kubelet kubelet-stock critlet-explain"
  "build: test-build"
  "package: test-package"
  "control-plane: control-plane node-tools"
  "e2e-node: test-e2e-node"
  "kubeadm-tools: kubeadm-tools"
  "e2e-kubeadm: test-e2e-kubeadm"
  "e2e-upstream-tools: e2e-upstream-tools"
  "e2e-upstream: test-e2e-upstream"
)

wanted=("$@")
for w in "${wanted[@]}"; do
  found=false
  for p in "${phases[@]}"; do
    [[ ${p%%:*} == "$w" ]] && found=true
  done
  $found || {
    echo "test-phases: no phase $w (phases: $(printf '%s ' "${phases[@]%%:*}"))" >&2
    exit 2
  }
done

mkdir -p _output
table=_output/test-phases.tsv
printf 'phase\tseconds\tresult\n' >"$table"
total_start=$(date +%s)

print_table() {
  echo
  echo "make test phases (wall time):"
  awk -F'\t' '{ printf "  %-20s %8s  %s\n", $1, $2, $3 }' "$table"
  echo "total: $(($(date +%s) - total_start)) s"
}

for p in "${phases[@]}"; do
  name=${p%%:*}
  read -ra targets <<<"${p#*:}"
  if ((${#wanted[@]} > 0)) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
    continue
  fi
  echo "=== phase ${name}: make ${targets[*]}"
  start=$(date +%s)
  status=0
  make --no-print-directory "${targets[@]}" || status=$?
  seconds=$(($(date +%s) - start))
  if ((status != 0)); then
    printf '%s\t%d\tFAIL\n' "$name" "$seconds" >>"$table"
    print_table
    echo "test-phases: phase ${name} failed (make ${targets[*]}: status ${status})" >&2
    exit 1
  fi
  printf '%s\t%d\tok\n' "$name" "$seconds" >>"$table"
done
print_table
