#!/usr/bin/env bash
# Installs what the tests need beyond Go: qemu-user-static, which runs the
# linux/arm64 test binaries of the victim selection and the handler here (go
# test -exec), rpm, which reads and installs the built .rpm as rpm-based hosts
# do, and busybox-static, the shell of the package tests' scratch roots.
# Does nothing when they are present.
set -euo pipefail

missing=()
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
command -v rpm >/dev/null || missing+=(rpm)
if [[ ! -x /bin/busybox || $(LC_ALL=C ldd /bin/busybox 2>&1 || true) != *'not a dynamic'* ]]; then
  missing+=(busybox-static)
fi
((${#missing[@]})) || exit 0
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt::install install-test-deps "${missing[@]}"
