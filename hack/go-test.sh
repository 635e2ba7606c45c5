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
# With CRITLET_TEST_COMPILE_ONLY=1 the suite's test binaries are compiled
# and linked exactly as the run would (same arguments, hence the same
# cache entries) but none runs: go test hands each to /bin/true. make test
# compiles so beside the node suites. The log is _output/compile-NAME.log.
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
    if [[ $arg == -exec || $arg == -exec=* ]]; then
      echo "go-test ${name}: compile-only, yet the arguments name -exec (${arg}): the binaries would run" >&2
      exit 2
    fi
  done
  if ! go test -exec /bin/true -count=1 "$@" >"$log" 2>&1; then
    cat "$log"
    echo "go-test ${name}: compiling the test binaries failed (whole output: ${log})" >&2
    exit 1
  fi
  echo "go-test ${name}: test binaries compiled, none run"
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
