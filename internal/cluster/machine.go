package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
)

// machineDir is where machine name's root, console log and files are.
func (c *Cluster) machineDir(name string) string { return filepath.Join(c.dir, "machines", name) }

// RootDir is machine name's root file system, as the host sees it.
func (c *Cluster) RootDir(name string) string { return filepath.Join(c.machineDir(name), "root") }

// ConsoleLog is machine name's console: systemd's boot messages.
func (c *Cluster) ConsoleLog(name string) string {
	return filepath.Join(c.machineDir(name), "console.log")
}

// nspawnArgs boots machine m: systemd as PID 1 in the network namespace
// systemd-nspawn inherits as descriptor 3 (launcherCmd), with every
// capability and the host's /dev/kmsg (the kubelet's OOM watcher reads
// it), not registered with a host systemd (there is none).
func (c *Cluster) nspawnArgs(m *Machine) []string {
	return []string{
		"--quiet", "--register=no", "--keep-unit", "--boot",
		"--directory=" + c.RootDir(m.Name), "--machine=" + m.Name,
		"--private-users=no", "--capability=all",
		// runc joins session keyrings and loads BPF device filters.
		"--system-call-filter=@keyring bpf",
		"--bind=/dev/kmsg",
		"--network-namespace-path=/proc/self/fd/3",
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
	// Opened once from the holder checked by PID and start time, and
	// handed to systemd-nspawn as a descriptor: by /proc/PID/ns/net, a
	// holder that had died would boot the machine in the network namespace
	// of whichever process had its PID then, the host's.
	nic, err := openNetns(m.NIC)
	if err != nil {
		return fmt.Errorf("booting machine %s: %w", name, err)
	}
	defer nic.Close() // systemd-nspawn has its own copy once started
	if err := c.makeCgroups(m); err != nil {
		return err
	}
	p, err := startDetached(name, c.launcherCmd(m, nic), c.ConsoleLog(name))
	if err != nil {
		return fmt.Errorf("booting machine %s: %w", name, err)
	}
	m.Boot = &p
	m.Boots++
	if err := c.save(); err != nil {
		return err
	}
	return c.waitBooted(ctx, m, nic)
}

// launcherCmd is the shell that joins m's cgroups and execs nspawn: the
// cgroups come first, then "--", then nspawn's arguments. nic, the
// machine's network namespace, is its descriptor 3, which the shell and
// its exec keep open: systemd-nspawn (252) opens the path it is given,
// /proc/self/fd/3, while that is still the descriptor it inherited
// (strace shows no close before). waitBooted checks the outcome.
func (c *Cluster) launcherCmd(m *Machine, nic *isolation.Namespaces) *exec.Cmd {
	script := `while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 1; shift; done; shift; exec systemd-nspawn "$@"`
	args := append([]string{"-c", script, "launcher"}, m.Cgroups...)
	args = append(args, "--")
	args = append(args, c.nspawnArgs(m)...)
	cmd := exec.Command("sh", args...)
	cmd.ExtraFiles = nic.Files()
	// nspawn takes settings from SYSTEMD_NSPAWN_* variables too, some of
	// which share the host's namespaces with the machine
	// (SYSTEMD_NSPAWN_USE_CGNS=0, SYSTEMD_NSPAWN_SHARE_NS_PID=1, …): such
	// a machine is never entered, and Boot would fail without saying why.
	// The machine is made by its arguments alone.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SYSTEMD_NSPAWN_") })
	return cmd
}

// waitBooted waits for systemd in m to finish booting: running, or
// degraded with the failed units named in the error. Before anything is
// run in m, its systemd's namespaces are checked once final: none of them
// the host's, and its network namespace nic's, the one it was booted
// with. Were it otherwise, m is halted at once.
func (c *Cluster) waitBooted(ctx context.Context, m *Machine, nic *isolation.Namespaces) error {
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	checked := false
	for time.Now().Before(deadline) {
		if m.Boot == nil || !m.Boot.Alive() {
			return fmt.Errorf("machine %s stopped while booting; see %s:\n%s", m.Name, c.ConsoleLog(m.Name), c.consoleTail(m.Name))
		}
		if !checked {
			ns, final, err := openBooted(m)
			if !final { // systemd not started yet
				last = err.Error()
				if err := ctx.Err(); err != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err == nil {
				err = checkNetwork(m, ns, nic)
				ns.Close()
			}
			if err != nil {
				return errors.Join(fmt.Errorf("%w: halted", err), c.halt(m))
			}
			checked = true
		}
		out, _ := c.Exec(ctx, m.Name, "systemctl", "is-system-running")
		out = strings.TrimSpace(out)
		last = fmt.Sprintf("systemd says %q", out)
		switch out {
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
	return fmt.Errorf("machine %s has not finished booting in 3m (%s); see %s", m.Name, last, c.ConsoleLog(m.Name))
}

// openBooted opens the namespaces of booting machine m's systemd
// (openMachine) once they are final, which final reports, error or not.
// nspawn's inner child makes its cgroup namespace after it has its others
// (machineSystemd): until then it may still be joining the machine's
// network namespace, and from then on one of the host's is there to stay.
func openBooted(m *Machine) (ns *isolation.Namespaces, final bool, err error) {
	sd, err := machineSystemd(m)
	if err != nil {
		return nil, false, err
	}
	cg, err := isolation.Open(sd, isolation.Cgroup)
	if err != nil {
		return nil, false, err
	}
	cg.Close()
	ns, err = openSystemd(m, sd)
	return ns, err == nil || errors.Is(err, isolation.ErrHostNamespace), err
}

func (c *Cluster) consoleTail(name string) string {
	b, _ := os.ReadFile(c.ConsoleLog(name))
	return tail(string(b), 15)
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
	// it, and the PID namespace with it. Only the process found as the
	// machine's systemd (machineSystemd) is signalled, by PID and start
	// time, even in namespaces it cannot be entered by: it has no
	// parent-death signal, and would outlive nspawn killed alone.
	if sd, err := machineSystemd(m); err == nil {
		if err := sd.Stop(0); err != nil {
			return err
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
