#!/usr/bin/env bash
# make test: every suite as timed phases, in two lanes. The node suites
# spend most of their time waiting on a node (the machine is three-quarters
# idle while they run), so while they run a second lane, niced, does the
# work that needs no node: the kubeadm and upstream suites' tools, go vet
# (which compiles what the unit tests need), and the suites that start no
# service and whose checks hold however slowly they run: the built
# binaries' checks, the packages', the race detector's and arm64's. The
# main lane keeps the node suites and, after them, the unit tests (some
# start containerd and supervise processes) and upstream's patched kubelet
# tests, whose timing a busy machine could disturb.
#
# The table (phase, lane, start and wall time in seconds, result) goes to
# standard output at the end, and when a phase fails, and to
# _output/test-phases.tsv; docs/test-time.md keeps the measured tables.
# A phase is make targets: the builds a suite needs are phases of their
# own, so a suite's time is its own.
#
#   hack/test-phases.sh            # every phase, both lanes
#   hack/test-phases.sh vet unit   # the named phases only, one after another
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/.."

# name: make targets. The main lane, in order (needs, below, says which
# phases wait for the side lane). Everything a suite in either lane reads
# (the kubelets, the packages, the control plane) is built before the side
# lane starts; asked for again later, each is left as it is.
main_phases=(
  "tools: node-deps test-deps cluster-deps"
  "kubelets: kubelet kubelet-stock critlet-explain package"
  "control-plane: control-plane node-tools critlet-cluster"
  "e2e-node: test-e2e-node"
  "e2e-kubeadm: test-e2e-kubeadm"
  "e2e-cluster: test-e2e-cluster"
  "e2e-upstream: test-e2e-upstream"
  "unit: test-go"
  "patched: test-patched-kubelet"
)
# The side lane, started once the main lane has built what the node
# suites run: nothing in it rebuilds those. The tools the main lane waits
# for come first.
side_phases=(
  "kubeadm-tools: kubeadm-tools"
  "e2e-upstream-tools: e2e-upstream-tools"
  "vet: test-vet"
  "build: test-build"
  "package: test-package"
  "race: test-race"
  "cross: test-cross"
)
# What a main phase needs of the side lane; the main lane waits for it.
declare -A needs=(
  [e2e-kubeadm]=kubeadm-tools
  [e2e-cluster]=kubeadm-tools
  [e2e-upstream]=e2e-upstream-tools
  [unit]=vet
)
start_side_lane_after=control-plane

# make test runs every test: a TEST_RUN left in the environment (or given
# to make, which passes it on in MAKEFLAGS) would narrow two suites
# silently.
if [[ -n ${TEST_RUN:-} || ${MAKEFLAGS:-} == *TEST_RUN=* ]]; then
  echo "test-phases: make test runs every test; unset TEST_RUN (it is for make test-e2e-node and test-patched-kubelet alone)" >&2
  exit 2
fi

mkdir -p _output
table=_output/test-phases.tsv
lane_dir=_output/test-lane
lane_log=_output/test-lane.log
total_start=$(date +%s)

# record NAME LANE START SECONDS RESULT appends a row to the table.
record() {
  printf '%s\t%s\t%d\t%d\t%s\n' "$1" "$2" "$(($3 - total_start))" "$4" "$5" >>"$table"
}

print_table() {
  echo
  echo "make test phases (seconds; start is from the beginning of the run):"
  awk -F'\t' '{ printf "  %-20s %-6s %6s %8s  %s\n", $1, $2, $3, $4, $5 }' "$table"
  echo "total: $(($(date +%s) - total_start)) s"
}

# run_phase LANE "NAME: TARGETS" runs one phase and records it; it returns
# make's status.
run_phase() {
  local lane=$1 p=$2
  local name=${p%%:*} targets status=0 start seconds result=ok
  read -ra targets <<<"${p#*:}"
  echo "=== phase ${name} (${lane}): make ${targets[*]}"
  start=$(date +%s)
  make --no-print-directory "${targets[@]}" || status=$?
  seconds=$(($(date +%s) - start))
  ((status == 0)) || result=FAIL
  record "$name" "$lane" "$start" "$seconds" "$result"
  return "$status"
}

# The named phases alone, one after another, in table order.
if (($# > 0)); then
  all=("${main_phases[@]:0:3}" "${side_phases[@]}" "${main_phases[@]:3}")
  for w in "$@"; do
    found=false
    for p in "${all[@]}"; do
      [[ ${p%%:*} == "$w" ]] && found=true
    done
    $found || {
      echo "test-phases: no phase $w (phases: $(printf '%s ' "${all[@]%%:*}"))" >&2
      exit 2
    }
  done
  printf 'phase\tlane\tstart\tseconds\tresult\n' >"$table"
  for p in "${all[@]}"; do
    [[ " $* " == *" ${p%%:*} "* ]] || continue
    run_phase main "$p" || {
      print_table
      echo "test-phases: phase ${p%%:*} failed" >&2
      exit 1
    }
  done
  print_table
  exit 0
fi

printf 'phase\tlane\tstart\tseconds\tresult\n' >"$table"
rm -rf "$lane_dir"
mkdir -p "$lane_dir"
lane_pid=

# The side lane: each phase leaves NAME.ok or NAME.fail in lane_dir; the
# first failure ends the lane. Its output goes to lane_log, whole, so that
# it does not interleave with the node suites'.
side_lane() {
  local p
  for p in "${side_phases[@]}"; do
    if run_phase side "$p"; then
      : >"${lane_dir}/${p%%:*}.ok"
    else
      : >"${lane_dir}/${p%%:*}.fail"
      return 1
    fi
  done
}

# side_lane_guarded runs the lane as the leader of its own session, and
# ends the session if the main lane's process (main_pid) is gone: a main
# lane killed outright (SIGKILL, a CI timeout) runs no exit trap.
side_lane_guarded() {
  side_lane &
  local body=$!
  while kill -0 "$body" 2>/dev/null; do
    if ! kill -0 "$main_pid" 2>/dev/null; then
      echo "test-phases: the main lane (pid ${main_pid}) is gone; stopping the side lane" >&2
      kill -TERM -- "-$$"
    fi
    sleep 2
  done
  wait "$body"
}

# A run that ends, however, takes the lane with it: nothing may go on
# running after make test has returned.
stop_lane() {
  if [[ -n $lane_pid ]] && kill -0 "$lane_pid" 2>/dev/null; then
    kill -TERM -- "-${lane_pid}" 2>/dev/null || true
    wait "$lane_pid" 2>/dev/null || true
  fi
}
trap stop_lane EXIT

lane_failed() {
  echo "test-phases: the side lane failed; its output (${lane_log}) ends:" >&2
  tail -n 60 "$lane_log" >&2
  print_table
  exit 1
}

# wait_for NAME waits until the side lane has done NAME; the wait is the
# main lane's and is recorded as a phase of its own when it lasts.
wait_for() {
  local name=$1 start
  start=$(date +%s)
  while [[ ! -e ${lane_dir}/${name}.ok ]]; do
    compgen -G "${lane_dir}/*.fail" >/dev/null && lane_failed
    if ! kill -0 "$lane_pid" 2>/dev/null; then
      compgen -G "${lane_dir}/*.fail" >/dev/null && lane_failed
      [[ -e ${lane_dir}/${name}.ok ]] && break
      echo "test-phases: the side lane ended without doing ${name}" >&2
      lane_failed
    fi
    sleep 1
  done
  if (($(date +%s) - start > 0)); then
    record "wait:${name}" main "$start" "$(($(date +%s) - start))" ok
  fi
}

for p in "${main_phases[@]}"; do
  name=${p%%:*}
  if [[ -n ${needs[$name]:-} ]]; then
    wait_for "${needs[$name]}"
  fi
  # A lane that failed fails the run before the next phase starts.
  compgen -G "${lane_dir}/*.fail" >/dev/null && lane_failed
  run_phase main "$p" || {
    print_table
    echo "test-phases: phase ${name} failed" >&2
    exit 1
  }
  if [[ $name == "$start_side_lane_after" ]]; then
    echo "=== side lane started (niced; output in ${lane_log})"
    # A session of its own, so that stop_lane ends every process in it;
    # nice and ionice so that the node suites come first.
    main_pid=$$
    setsid nice -n 19 ionice -c 3 bash -c "$(declare -f record run_phase side_lane side_lane_guarded); $(declare -p side_phases lane_dir table total_start main_pid); side_lane_guarded" \
      >"$lane_log" 2>&1 &
    lane_pid=$!
  fi
done
# The run ends when the side lane's last phase has.
last=${side_phases[-1]}
wait_for "${last%%:*}"
wait "$lane_pid" || lane_failed
lane_pid=
print_table
