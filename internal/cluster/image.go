package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The machines' Debian: bookworm, whose systemd (252) still boots on a
// cgroup v1 host; systemd 256 and later refuse to.
const (
	suite  = "bookworm"
	mirror = "http://deb.debian.org/debian"
)

// machinePackages are what a machine has before anything Kubernetes is
// installed: systemd as init, containerd and runc, the CNI plugins, and
// what kubeadm's preflight and the kubelet call.
var machinePackages = []string{
	"systemd", "systemd-sysv", "dbus", "apt", "ca-certificates",
	"containerd", "runc", "containernetworking-plugins",
	"iptables", "iproute2", "conntrack", "ethtool", "socat", "ebtables",
	"kmod", "util-linux", "mount", "procps",
}

// imageKey names a root built from these packages: a changed list builds
// a new one.
func imageKey() string {
	h := sha256.Sum256([]byte(suite + "\n" + mirror + "\n" + strings.Join(machinePackages, "\n")))
	return hex.EncodeToString(h[:8])
}

// imagePath is where the image of machinePackages is kept in cacheDir.
func imagePath(cacheDir string) string {
	return filepath.Join(cacheDir, "machine-"+suite+"-"+imageKey()+".tar")
}

// EnsureImage returns the machines' root file system as a tar archive in
// cacheDir, built with mmdebstrap unless a build of the same packages is
// there. The archive is written beside its final name and renamed, so a
// failed build leaves nothing that looks finished.
func EnsureImage(ctx context.Context, cacheDir string) (string, bool, error) {
	path := imagePath(cacheDir)
	if _, err := os.Stat(path); err == nil {
		return path, false, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", false, fmt.Errorf("machine image cache: %w", err)
	}
	tmp := path + ".partial"
	_ = os.Remove(tmp)
	cmd := exec.CommandContext(ctx, "mmdebstrap", "--variant=minbase", "--include="+strings.Join(machinePackages, ","),
		"--format=tar", suite, tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", false, fmt.Errorf("building the machine image with mmdebstrap: %w\n%s", err, tail(string(out), 20))
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", false, fmt.Errorf("machine image: %w", err)
	}
	// Older builds of other package lists are of no use.
	old, _ := filepath.Glob(filepath.Join(cacheDir, "machine-*.tar"))
	for _, o := range old {
		if o != path {
			_ = os.Remove(o)
		}
	}
	return path, true, nil
}

// tail is s's last n lines.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
