package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
)

// machineDir is where machine name's root, console log and files are.
func (c *Cluster) machineDir(name string) string { return filepath.Join(c.dir, "machines", name) }

// RootDir is machine name's root file system, as the host sees it.
func (c *Cluster) RootDir(name string) string { return filepath.Join(c.machineDir(name), "root") }

// ConsoleLog is machine name's console: systemd's boot messages.
func (c *Cluster) ConsoleLog(name string) string {
	return filepath.Join(c.machineDir(name), "console.log")
}

// nspawnArgs boots machine m: systemd as PID 1 in m's network namespace,
// with every capability and the host's /dev/kmsg (the kubelet's OOM
// watcher reads it), not registered with a host systemd (there is none).
func (c *Cluster) nspawnArgs(m *Machine) []string {
	return []string{
		"--quiet", "--register=no", "--keep-unit", "--boot",
		"--directory=" + c.RootDir(m.Name), "--machine=" + m.Name,
		"--private-users=no", "--capability=all",
		// runc joins session keyrings and loads BPF device filters.
		"--system-call-filter=@keyring bpf",
		"--bind=/dev/kmsg",
		"--network-namespace-path=" + netnsPath(m.NIC),
		"--resolv-conf=off", "--timezone=off", "--link-journal=no", "--console=passive",
	}
}

// Boot boots machine name and waits until its systemd has started
// everything it starts at boot.
func (c *Cluster) Boot(ctx context.Context, name string) error {
	m, err := c.machine(name)
	if err != nil {
		return err
	}
	if m.Boot != nil && m.Boot.Alive() {
		return fmt.Errorf("machine %s is running", name)
	}
	if err := c.makeCgroups(m); err != nil {
		return err
	}
	p, err := startDetached(name, c.launcherCmd(m), c.ConsoleLog(name))
	if err != nil {
		return fmt.Errorf("booting machine %s: %w", name, err)
	}
	m.Boot = &p
	m.Boots++
	if err := c.save(); err != nil {
		return err
	}
	return c.waitBooted(ctx, m)
}

// launcherCmd is the shell that joins m's cgroups and execs nspawn: the
// cgroups come first, then "--", then nspawn's arguments.
func (c *Cluster) launcherCmd(m *Machine) *exec.Cmd {
	script := `while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 1; shift; done; shift; exec systemd-nspawn "$@"`
	args := append([]string{"-c", script, "launcher"}, m.Cgroups...)
	args = append(args, "--")
	args = append(args, c.nspawnArgs(m)...)
	return exec.Command("sh", args...)
}

// leader is the PID of machine m's systemd, nspawn's child.
func leader(m *Machine) (int, error) {
	if m.Boot == nil || !m.Boot.Alive() {
		return 0, fmt.Errorf("machine %s is not running", m.Name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", m.Boot.PID, m.Boot.PID))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("machine %s: systemd-nspawn has no child yet", m.Name)
	}
	return strconv.Atoi(f[0])
}

// waitBooted waits for systemd in m to finish booting: running, or
// degraded with the failed units named in the error.
func (c *Cluster) waitBooted(ctx context.Context, m *Machine) error {
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		if m.Boot == nil || !m.Boot.Alive() {
			return fmt.Errorf("machine %s stopped while booting; see %s:\n%s", m.Name, c.ConsoleLog(m.Name), c.consoleTail(m.Name))
		}
		out, _ := c.Exec(ctx, m.Name, "systemctl", "is-system-running")
		last = strings.TrimSpace(out)
		switch last {
		case "running":
			return nil
		case "degraded":
			failed, _ := c.Exec(ctx, m.Name, "systemctl", "--failed", "--no-legend", "--plain")
			return fmt.Errorf("machine %s booted degraded: %s", m.Name, strings.TrimSpace(failed))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("machine %s has not finished booting in 3m (systemd says %q); see %s", m.Name, last, c.ConsoleLog(m.Name))
}

func (c *Cluster) consoleTail(name string) string {
	b, _ := os.ReadFile(c.ConsoleLog(name))
	return tail(string(b), 15)
}

// Exec runs a command in machine name, in all its namespaces, with the
// environment a root shell there would have, and returns its output
// (standard output and error together).
func (c *Cluster) Exec(ctx context.Context, name string, args ...string) (string, error) {
	return c.ExecInput(ctx, name, nil, args...)
}

// ExecInput is Exec with standard input.
func (c *Cluster) ExecInput(ctx context.Context, name string, stdin []byte, args ...string) (string, error) {
	m, err := c.machine(name)
	if err != nil {
		return "", err
	}
	pid, err := leader(m)
	if err != nil {
		return "", err
	}
	full := append([]string{"-t", strconv.Itoa(pid), "-a", "--", "env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
		"DEBIAN_FRONTEND=noninteractive"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", strings.Join(args, " "), name, err, tail(string(out), 20))
	}
	return string(out), nil
}

// PowerOff shuts machine name down as `systemctl poweroff` does and waits
// for systemd-nspawn to exit.
func (c *Cluster) PowerOff(ctx context.Context, name string) error {
	m, err := c.machine(name)
	if err != nil {
		return err
	}
	if m.Boot == nil || !m.Boot.Alive() {
		m.Boot = nil
		return c.save()
	}
	// The command loses its systemd half-way: its result says nothing.
	_, _ = c.Exec(ctx, name, "systemctl", "poweroff")
	if !m.Boot.Wait(2 * time.Minute) {
		return fmt.Errorf("machine %s did not power off within 2m", name)
	}
	m.Boot = nil
	return c.save()
}

// PowerCut stops machine name at once, as pulling its plug does: nothing
// in it is told.
func (c *Cluster) PowerCut(ctx context.Context, name string) error {
	m, err := c.machine(name)
	if err != nil {
		return err
	}
	return c.halt(m)
}

// halt stops machine m at once: its systemd killed, and with it the
// machine's PID namespace; then systemd-nspawn exits.
func (c *Cluster) halt(m *Machine) error {
	if m.Boot == nil {
		return nil
	}
	// systemd as PID 1 ignores SIGTERM from outside: Stop's SIGKILL ends
	// it, and the PID namespace with it.
	if pid, err := leader(m); err == nil {
		if sd, err := process.Find(m.Name+" systemd", pid); err == nil {
			if err := sd.Stop(0); err != nil {
				return err
			}
		}
	}
	if !m.Boot.Wait(30 * time.Second) {
		if err := m.Boot.Stop(0); err != nil {
			return err
		}
	}
	m.Boot = nil
	return c.save()
}
