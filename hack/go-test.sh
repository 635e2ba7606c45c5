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
