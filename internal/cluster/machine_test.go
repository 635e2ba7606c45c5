package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeLauncher puts a shell in front of PATH that stands in for the
// launcher's: it records what its descriptor 3 is and its arguments in
// the file it returns, its environment in that file's name with ".env",
// and exits a second later, as an nspawn that failed to boot would.
func fakeLauncher(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	record := filepath.Join(dir, "launched")
	script := fmt.Sprintf("#!/bin/sh\n{ readlink /proc/self/fd/3; printf '%%s\\n' \"$@\"; } > %s\nenv > %[1]s.env\nexec /bin/sleep 1\n", record)
	if err := os.WriteFile(filepath.Join(dir, "sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return record
}

// systemd-nspawn is handed the machine's network namespace as a descriptor
// opened from its holder as checked, never a /proc/PID path; a holder
// whose PID another process has now boots nothing.
func TestBootHandsTheHoldersNamespace(t *testing.T) {
	needNamespaceTools(t)
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale holder %v", stale), func(t *testing.T) {
			record := fakeLauncher(t)
			holder := testHolder(t, "n1 nic")
			m := &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), NIC: holder}
			if stale {
				m.NIC.Started++
			}
			c := &Cluster{dir: t.TempDir(), rec: Record{Machines: []*Machine{m}}}
			if err := os.MkdirAll(c.machineDir("n1"), 0o755); err != nil {
				t.Fatal(err)
			}
			err := c.Boot(context.Background(), "n1")
			b, rerr := os.ReadFile(record)
			if stale {
				if err == nil || !strings.Contains(err.Error(), "is gone") || rerr == nil || m.Boot != nil {
					t.Errorf("Boot with a stale holder: %v, launched %v (%q); want it refused before anything runs", err, rerr == nil, b)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "stopped while booting") {
				t.Errorf("Boot with a launcher that exits: %v, want it to say the machine stopped", err)
			}
			if rerr != nil {
				t.Fatalf("the launcher never ran: %v", rerr)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if lines[0] != netnsLink(t, holder.PID) {
				t.Errorf("the launcher's descriptor 3 is %q, want the holder's network namespace %q", lines[0], netnsLink(t, holder.PID))
			}
			if !slices.Contains(lines, "--network-namespace-path=/proc/self/fd/3") {
				t.Errorf("nspawn's arguments lack the descriptor's path:\n%s", b)
			}
			if pidPath := fmt.Sprintf("/proc/%d/", holder.PID); strings.Contains(string(b), pidPath) {
				t.Errorf("nspawn's arguments name the holder by PID (%s):\n%s", pidPath, b)
			}
		})
	}
}

// systemd-nspawn is started without the operator's SYSTEMD_NSPAWN_*
// variables, some of which would share the host's namespaces with the
// machine; the rest of the environment is passed on.
func TestBootLeavesOutNspawnSettings(t *testing.T) {
	needNamespaceTools(t)
	record := fakeLauncher(t)
	t.Setenv("SYSTEMD_NSPAWN_USE_CGNS", "0")
	t.Setenv("SYSTEMD_NSPAWN_SHARE_NS_PID", "1")
	t.Setenv("CRITLET_TEST_KEPT", "kept")
	m := &Machine{Name: "n1", Index: 1, Addr: MachineAddr(1), NIC: testHolder(t, "n1 nic")}
	c := &Cluster{dir: t.TempDir(), rec: Record{Machines: []*Machine{m}}}
	if err := os.MkdirAll(c.machineDir("n1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Boot(context.Background(), "n1"); err == nil || !strings.Contains(err.Error(), "stopped while booting") {
		t.Errorf("Boot with a launcher that exits: %v, want it to say the machine stopped", err)
	}
	env, err := os.ReadFile(record + ".env")
	if err != nil {
		t.Fatalf("the launcher never ran: %v", err)
	}
	if strings.Contains(string(env), "SYSTEMD_NSPAWN_") || !strings.Contains(string(env), "CRITLET_TEST_KEPT=kept\n") {
		t.Errorf("the launcher's environment has nspawn's settings or lacks the rest:\n%s", env)
	}
}

// A process started detached is found, start time and all, even when it
// exits at once: it is not reaped before, so its PID is no other
// process's meanwhile. (Reaped first, it was lost a few times in 200.)
func TestStartDetachedOfAProcessThatExitsAtOnce(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	for range 200 {
		cmd := exec.Command("/bin/true")
		p, err := startDetached("n1", cmd, log)
		if err != nil || p.PID != cmd.Process.Pid || p.Started == 0 {
			t.Fatalf("startDetached of a process that exits at once: %+v, %v", p, err)
		}
	}
}
