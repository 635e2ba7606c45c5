package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// machineFile is a file written into a machine's root before its first
// boot.
type machineFile struct {
	path string
	mode os.FileMode
	data string
}

// kernelMasks are the kernel settings the kubelet sets on start (its
// container manager's kernel tunables) with the values it wants. They are
// not namespaced, and systemd-nspawn keeps /proc/sys read-only so that no
// machine changes the host's: each machine covers them with files of its
// own holding these values, which the kubelet reads and leaves alone.
var kernelMasks = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// hostSetupScript runs at each boot before containerd: systemd-nspawn
// mounts the cgroup v1 controllers read-only in a machine (it cannot
// delegate them without a host systemd), and runc and the kubelet make
// cgroups there, so they are made writable (a bind remount changes this
// mount's flag only); and the kernel settings above are covered.
const hostSetupScript = `#!/bin/sh
set -eu
for h in /sys/fs/cgroup/*/; do
  mount -o remount,bind,rw "$h"
done
for f in $(cd /usr/local/lib/critlet-machine/sysctl && find . -type f); do
  mount --bind "/usr/local/lib/critlet-machine/sysctl/$f" "/proc/sys/$f"
done
`

const hostSetupUnit = `[Unit]
Description=Machine set-up for containers: writable cgroup controllers, the kubelet's kernel settings covered
DefaultDependencies=no
After=local-fs.target
Before=containerd.service kubelet.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/lib/critlet-machine/host-setup

[Install]
WantedBy=sysinit.target
`

// containerdConfig points containerd's CRI at the sandbox image built
// here and the CNI configuration below; runc on cgroupfs, as the kubelet.
// This kind of host lacks CAP_SYS_RESOURCE (so its machines do): runc
// could not give a sandbox its oom_score_adj of -998, and every sandbox
// would fail ("can't get final child's PID from pipe: EOF").
const containerdConfig = `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%s"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`

// cniConfig gives machine i's pods addresses on a bridge of their own.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "critlet-machine",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// machineFiles are machine m's files, given every machine of the cluster
// (for /etc/hosts) and the sandbox image's reference.
func machineFiles(m *Machine, all []*Machine, pauseRef string) []machineFile {
	hosts := "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
	for _, o := range all {
		hosts += o.Addr + " " + o.Name + "\n"
	}
	files := []machineFile{
		{"/etc/hostname", 0o644, m.Name + "\n"},
		{"/etc/hosts", 0o644, hosts},
		// No name server leaves the bridge: none answers.
		{"/etc/resolv.conf", 0o644, "nameserver " + hubAddr + "\n"},
		// The host's kernel log is the host's.
		{"/etc/systemd/journald.conf.d/critlet-machine.conf", 0o644, "[Journal]\nReadKMsg=no\n"},
		{"/usr/local/lib/critlet-machine/host-setup", 0o755, hostSetupScript},
		{"/etc/systemd/system/critlet-machine-host.service", 0o644, hostSetupUnit},
		{"/etc/systemd/system/sysinit.target.wants/critlet-machine-host.service", os.ModeSymlink, "/etc/systemd/system/critlet-machine-host.service"},
		{"/etc/containerd/config.toml", 0o644, fmt.Sprintf(containerdConfig, pauseRef)},
		{"/etc/cni/net.d/10-critlet-machine.conflist", 0o644, fmt.Sprintf(cniConfig, podSubnetPrefix+strconv.Itoa(m.Index)+".")},
		// Timers that would reach for Debian's mirrors, which the
		// machines cannot reach.
		{"/etc/systemd/system/apt-daily.timer", os.ModeSymlink, "/dev/null"},
		{"/etc/systemd/system/apt-daily-upgrade.timer", os.ModeSymlink, "/dev/null"},
	}
	for key, v := range kernelMasks {
		files = append(files, machineFile{"/usr/local/lib/critlet-machine/sysctl/" + key, 0o644, v + "\n"})
	}
	return files
}

// writeMachineFiles writes files under root, replacing what the image had.
func writeMachineFiles(root string, files []machineFile) error {
	for _, f := range files {
		p := filepath.Join(root, strings.TrimPrefix(f.path, "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		var err error
		if f.mode&os.ModeSymlink != 0 {
			err = os.Symlink(f.data, p)
		} else {
			err = os.WriteFile(p, []byte(f.data), f.mode)
		}
		if err != nil {
			return fmt.Errorf("machine file %s: %w", f.path, err)
		}
	}
	return nil
}
