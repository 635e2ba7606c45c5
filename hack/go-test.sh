#!/usr/bin/env bash
# Runs one test suite of make test: go test -v with the given arguments,
# its whole output kept in _output/test-NAME.log. Fails when go test fails,
# when any test skipped, or when no test ran at all: under make test a
# suite that runs nothing must not pass (test/testenv turns a missing
# tool into a failure; this catches every other way of running nothing).
#
#   hack/go-test.sh NAME [--stream] -- GO_TEST_ARGS...
#
# --stream prints the output as it comes (the long node suites); otherwise
# only the packages' result lines are printed, and the whole log on failure.
#
# With CRITLET_TEST_COMPILE_ONLY=1 nothing runs and nothing is linked:
# go vet with a vet tool that analyses nothing (hack/compile-only-vettool)
# compiles every dependency of the packages and of their tests, with the
# same build flags, hence into the same entries of Go's cache as the run's.
# GO_TEST_ARGS are then build flags and packages only. make test compiles
# so beside the node suites. The log is _output/compile-NAME.log.
set -euo pipefail
shopt -s inherit_errexit

usage() {
  echo "usage: $0 NAME [--stream] -- GO_TEST_ARGS..." >&2
  exit 2
}

name=${1:-}
[[ -n $name && $name != -* ]] || usage
shift
stream=false
if [[ ${1:-} == --stream ]]; then
  stream=true
  shift
fi
[[ ${1:-} == -- ]] || usage
shift

cd "$(dirname "$0")/.."
mkdir -p _output

if [[ ${CRITLET_TEST_COMPILE_ONLY:-} == 1 ]]; then
  log=_output/compile-${name}.log
  for arg in "$@"; do
    case $arg in
      -run | -run=* | -exec | -exec=* | -count | -count=* | -timeout | -timeout=* | -v | -args)
        echo "go-test ${name}: compile-only takes build flags and packages, not the test flag ${arg}" >&2
        exit 2
        ;;
    esac
  done
  if ! go vet -vettool="$(pwd)/hack/compile-only-vettool" "$@" >"$log" 2>&1; then
    cat "$log"
    echo "go-test ${name}: compiling failed (whole output: ${log})" >&2
    exit 1
  fi
  echo "go-test ${name}: compiled, nothing run or linked"
  exit 0
fi

log=_output/test-${name}.log

status=0
if $stream; then
  go test -v "$@" 2>&1 | tee "$log" || status=$?
else
  go test -v "$@" >"$log" 2>&1 || status=$?
  grep -E '^(ok|FAIL|\?) ' "$log" || true
fi

fail() {
  $stream || cat "$log"
  echo "go-test ${name}: $* (whole output: ${log})" >&2
  exit 1
}

((status == 0)) || fail "go test exited with status ${status}"
if grep -q -- '--- SKIP' "$log"; then
  grep -- '--- SKIP' "$log" >&2
  fail "the tests above skipped; under make test every test must run"
fi
if grep -q -e 'no tests to run' "$log"; then
  fail "a package or -run pattern selected no test"
fi
passed=$(grep -c -- '--- PASS' "$log" || true)
((passed > 0)) || fail "no test ran"
echo "go-test ${name}: ${passed} passed, 0 failed"
