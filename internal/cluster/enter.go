package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
)

// A machine is entered through its systemd's namespaces, each opened once
// through descriptors and never named by PID again: commands run there as
// root (poweroff, apt, kubeadm), and a PID reused by a host process would
// aim them at the host.

// machineSystemd finds machine m's systemd: the child of systemd-nspawn
// in a PID namespace of its own. The children are read through nspawn's
// /proc directory checked by PID and start time, each confirmed to be
// nspawn's (process.Ref.Children), and the PID namespace through the
// child's own checked directory (isolation.Open). That is enough to kill
// it (halt), not to enter it (openMachine).
//
// nspawn has one child at a time. The first, its outer child, is in a
// mount namespace of its own only: it is refused, and looked for again.
// The outer child forks the inner one, in new mount, UTS, IPC and PID
// namespaces, and exits; the inner child, nspawn's from then on, joins
// the machine's network namespace right after the fork, makes its cgroup
// namespace once nspawn has moved it to the machine's cgroups, and execs
// systemd. Every child is tried all the same.
func machineSystemd(m *Machine) (process.Ref, error) {
	if m.Boot == nil {
		return process.Ref{}, fmt.Errorf("machine %s is not running", m.Name)
	}
	children, err := m.Boot.Children()
	if err != nil {
		return process.Ref{}, fmt.Errorf("machine %s is not running: %w", m.Name, err)
	}
	if len(children) == 0 {
		return process.Ref{}, fmt.Errorf("machine %s: systemd-nspawn has no child yet", m.Name)
	}
	var errs []error
	for _, sd := range children {
		sd.Name = m.Name + " systemd"
		ns, err := isolation.Open(sd, isolation.PID)
		if err == nil {
			ns.Close()
			return sd, nil
		}
		errs = append(errs, err)
	}
	return process.Ref{}, fmt.Errorf("machine %s: no child of systemd-nspawn (pid %d) is in a PID namespace of its own: %w", m.Name, m.Boot.PID, errors.Join(errs...))
}

// openMachine opens the namespaces of machine m's systemd
// (machineSystemd), every kind nsenter -a joins there, through its
// checked /proc directory, none of them the host's (isolation.Open).
func openMachine(m *Machine) (*isolation.Namespaces, error) {
	sd, err := machineSystemd(m)
	if err != nil {
		return nil, err
	}
	return openSystemd(m, sd)
}

// openSystemd opens the namespaces of sd, machine m's systemd, as
// openMachine does.
func openSystemd(m *Machine, sd process.Ref) (*isolation.Namespaces, error) {
	ns, err := isolation.Open(sd, isolation.ContainerKinds...)
	if err != nil {
		return nil, fmt.Errorf("machine %s: its systemd is not in namespaces of its own: %w", m.Name, err)
	}
	return ns, nil
}

// checkNetwork fails unless ns, machine m's systemd's namespaces, has nic
// for its network namespace: the one m was booted with, compared by
// descriptor.
func checkNetwork(m *Machine, ns, nic *isolation.Namespaces) error {
	same, err := ns.Same(isolation.Net, nic)
	if err == nil && !same {
		err = fmt.Errorf("machine %s: its systemd (pid %d) is not in the network namespace held by %s (pid %d), which it was booted with", m.Name, ns.Holder().PID, nic.Holder().Name, nic.Holder().PID)
	}
	return err
}

// Exec runs a command in machine name, in all its namespaces, with the
// environment a root shell there would have, and returns its output
// (standard output and error together).
func (c *Cluster) Exec(ctx context.Context, name string, args ...string) (string, error) {
	return c.ExecInput(ctx, name, nil, args...)
}

// ExecInput is Exec with standard input. The command works in the
// machine's /: joining its mount namespace puts it at that namespace's
// root.
func (c *Cluster) ExecInput(ctx context.Context, name string, stdin []byte, args ...string) (string, error) {
	m, err := c.machine(name)
	if err != nil {
		return "", err
	}
	ns, err := openMachine(m)
	if err != nil {
		return "", err
	}
	defer ns.Close() // nsenter has its own copies once started
	enter, err := ns.EnterArgs("/")
	if err != nil {
		return "", err
	}
	full := append(enter, "env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
		"DEBIAN_FRONTEND=noninteractive")
	cmd := exec.CommandContext(ctx, "nsenter", append(full, args...)...)
	cmd.ExtraFiles = ns.Files()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", strings.Join(args, " "), name, err, tail(string(out), 20))
	}
	return string(out), nil
}
