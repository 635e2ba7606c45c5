//go:build e2ecluster

package e2ecluster

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/hoststate"
)

// machineMark is in the name of every cgroup a machine has on the host.
const machineMark = "critlet-machine-"

// hostRecord is what the cluster must leave as it found it: hoststate's
// items (sysctls, mounts, network devices, firewall rules), the node
// paths, the entries of / and systemd-nspawn's /run/systemd/nspawn, any
// cgroup of a machine at any depth, and the processes in one or naming
// the state directory.
func hostRecord(t *testing.T) hoststate.State {
	t.Helper()
	s, err := hoststate.Capture(hoststate.NodeScope(*stateDir))
	if err != nil {
		t.Fatal(err)
	}
	s.AddFiles(hoststate.NodePaths)
	s.AddEntries("/")
	// Only nspawn's part of /run/systemd: other suites may run systemctl
	// on the host meanwhile (make test's side lane), which writes there.
	s.AddFiles([]string{"/run/systemd/nspawn"})
	if err := s.AddProcesses("/"+machineMark, *stateDir); err != nil {
		t.Fatal(err)
	}
	var cgs []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Contains(filepath.Base(p), machineMark) {
			cgs = append(cgs, p)
			return fs.SkipDir
		}
		if strings.Count(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/") > 4 {
			return fs.SkipDir
		}
		return nil
	})
	s["machine cgroups"] = strings.Join(cgs, "\n")
	if _, err := os.Stat("/run/systemd/nspawn"); err == nil {
		s["nspawn run directory"] = "present"
	}
	return s
}
