#!/usr/bin/env bash
# Installs what the unit tests need beyond Go: qemu-user-static, which runs
# the linux/arm64 test binaries of the victim selection and the handler
# here (go test -exec). Does nothing when it is present.
set -euo pipefail

command -v qemu-aarch64-static >/dev/null && exit 0
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt::install install-test-deps qemu-user-static
