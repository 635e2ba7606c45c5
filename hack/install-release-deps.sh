#!/usr/bin/env bash
# Installs what make release needs beyond Go: Debian's cross compiler and C
# library for arm64 (the kubelet links the C library, as upstream's release
# builds do), and qemu-user-static to run the arm64 kubelet's --version
# check. Does nothing when they are present.
set -euo pipefail

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
((${#missing[@]})) || exit 0
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt::install install-release-deps "${missing[@]}"
