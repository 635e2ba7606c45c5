package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/critlet/critlet/internal/localnode/isolation"
	"github.com/critlet/critlet/internal/localnode/process"
)

// The machines' network: a hub namespace holding bridge hubBridge, and one
// namespace per machine (its NIC) holding eth0, a veth whose peer is on
// the bridge. Each namespace is held by a sleeping process of this
// package's, so that a machine keeps its address across its boots, and no
// name is made under /run/netns. Nothing is routed off the bridge.

const hubBridge = "critlet0"

// holdNetns starts a process in a new network namespace and waits until
// it is in it.
func holdNetns(ctx context.Context, name, logPath string) (process.Ref, error) {
	p, err := startDetached(name, exec.Command("unshare", "--net", "--", "sleep", "infinity"), logPath)
	if err != nil {
		return p, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ns, err := openNetns(p)
		if err == nil {
			ns.Close()
			return p, nil
		}
		if !errors.Is(err, isolation.ErrHostNamespace) {
			return p, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("process %d did not enter a network namespace of its own", p.PID)
		}
	}
}

// openNetns opens holder's network namespace, through its /proc directory
// checked by PID and start time, and refuses the host's
// (isolation.ErrHostNamespace). A holder is only ever entered through the
// descriptor: by /proc/PID/ns/net, a holder that had died would give the
// network namespace of whichever process had its PID then, the host's.
func openNetns(holder process.Ref) (*isolation.Namespaces, error) {
	ns, err := isolation.Open(holder, isolation.Net)
	if err != nil {
		return nil, fmt.Errorf("the network namespace held by %s: %w", holder.Name, err)
	}
	return ns, nil
}

// inNetns runs commands in holder's network namespace (openNetns).
func inNetns(ctx context.Context, holder process.Ref, cmds ...[]string) error {
	ns, err := openNetns(holder)
	if err != nil {
		return err
	}
	defer ns.Close()
	return runInNetns(ctx, ns, nil, cmds...)
}

// netnsCommand is command c in the network namespace ns, given extra as
// the descriptors after ns's own: entered through ns's descriptors, never
// a holder's PID.
func netnsCommand(ctx context.Context, ns *isolation.Namespaces, extra []*os.File, c ...string) (*exec.Cmd, error) {
	enter, err := ns.EnterArgs("/")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(enter, c...)...)
	cmd.ExtraFiles = append(ns.Files(), extra...)
	return cmd, nil
}

// runInNetns runs commands in the network namespace ns, each given extra
// as the descriptors after ns's own (isolation.Namespaces.EnterArgs).
func runInNetns(ctx context.Context, ns *isolation.Namespaces, extra []*os.File, cmds ...[]string) error {
	for _, c := range cmds {
		cmd, err := netnsCommand(ctx, ns, extra, c...)
		if err != nil {
			return err
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v in the network namespace held by %s (pid %d): %w: %s", c, ns.Holder().Name, ns.Holder().PID, err, out)
		}
	}
	return nil
}

// setUpHub makes the bridge in the hub's namespace, with the hub's address
// (the machines' default gateway, which leads nowhere further).
func setUpHub(ctx context.Context, hub process.Ref) error {
	return inNetns(ctx, hub,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", hubBridge, "type", "bridge"},
		[]string{"ip", "addr", "add", hubAddr + "/" + strconv.Itoa(subnetLen), "dev", hubBridge},
		[]string{"ip", "link", "set", hubBridge, "up"},
	)
}

// plugIn gives machine m's namespace its eth0 on the hub's bridge.
func plugIn(ctx context.Context, hub process.Ref, m *Machine) error {
	hubNS, err := openNetns(hub)
	if err != nil {
		return err
	}
	defer hubNS.Close()
	nic, err := openNetns(m.NIC)
	if err != nil {
		return err
	}
	defer nic.Close()
	port := "m" + strconv.Itoa(m.Index)
	// eth0 is moved to the machine's namespace by its descriptor, given to
	// ip after the hub's (ip takes a path for netns), not by the holder's
	// PID.
	peerNetns := "/proc/self/fd/" + strconv.Itoa(3+len(hubNS.Files()))
	if err := runInNetns(ctx, hubNS, nic.Files(),
		[]string{"ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", peerNetns},
		[]string{"ip", "link", "set", port, "master", hubBridge, "up"},
	); err != nil {
		return err
	}
	return runInNetns(ctx, nic, nil,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "addr", "add", m.Addr + "/" + strconv.Itoa(subnetLen), "dev", "eth0"},
		[]string{"ip", "link", "set", "eth0", "up"},
		[]string{"ip", "route", "add", "default", "via", hubAddr},
		// kubeadm's preflight wants forwarding on, which is the
		// namespace's own; systemd-nspawn keeps /proc/sys read-only
		// inside, so it is set here.
		[]string{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	)
}
