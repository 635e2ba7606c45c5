#!/bin/sh
# After install, upgrade and removal: let a running systemd see the changed
# kubelet.service and drop-in. Neither starts nor restarts the kubelet, as the
# stock package does not. Nothing happens when the package is installed into
# another root (DPKG_ROOT, rpm --root) or on a host without systemd.
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl daemon-reload || true
fi
