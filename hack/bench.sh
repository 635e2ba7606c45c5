#!/usr/bin/env bash
# Benchmarks critical-pod admission, stock against critlet, and summarises
# them with benchstat (medians over COUNT runs).
#
#   hack/bench.sh                 # COUNT=6
#   COUNT=10 hack/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
BENCHSTAT=${BENCHSTAT:-golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da}
out=_output/bench
mkdir -p "$out"

# The stock handler needs seconds per admission at 5,000 pods: one
# iteration per run is plenty there.
go test -trimpath -run '^$' -count "$COUNT" -benchmem \
  -bench 'HandleAdmissionFailure/impl=.*/pods=(110|1000)$|RequestFloor|HandleAdmissionFailure/impl=critlet' \
  ./overlay/k8s.io/kubernetes/pkg/kubelet/preemption | grep -E '^(goos|goarch|pkg|cpu|Benchmark)' >"$out/admission.txt"
go test -trimpath -run '^$' -count "$COUNT" -benchmem -benchtime 1x \
  -bench 'HandleAdmissionFailure/impl=stock/pods=5000$' \
  ./overlay/k8s.io/kubernetes/pkg/kubelet/preemption | grep -E '^Benchmark' >>"$out/admission.txt"
go test -trimpath -run '^$' -count "$COUNT" -bench 'Termination' \
  ./overlay/k8s.io/kubernetes/pkg/kubelet/preemption | grep -E '^(goos|goarch|pkg|cpu|Benchmark)' >"$out/termination.txt"

echo "== admission: stock vs critlet (columns by implementation)"
go run "$BENCHSTAT" -col /impl "$out/admission.txt"
echo
echo "== termination latency with five victims that each take 20ms to stop"
go run "$BENCHSTAT" "$out/termination.txt"
