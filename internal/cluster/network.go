package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

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
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return p, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ns, err := os.Readlink(netnsPath(p))
		if err == nil && ns != self {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("process %d did not enter a network namespace of its own", p.PID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func netnsPath(p process.Ref) string { return "/proc/" + strconv.Itoa(p.PID) + "/ns/net" }

// inNetns runs ip's commands in p's network namespace.
func inNetns(ctx context.Context, p process.Ref, cmds ...[]string) error {
	for _, c := range cmds {
		args := append([]string{"--net=" + netnsPath(p), "--"}, c...)
		if out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v in namespace of %d: %w: %s", c, p.PID, err, out)
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
	port := "m" + strconv.Itoa(m.Index)
	if err := inNetns(ctx, hub,
		[]string{"ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(m.NIC.PID)},
		[]string{"ip", "link", "set", port, "master", hubBridge, "up"},
	); err != nil {
		return err
	}
	return inNetns(ctx, m.NIC,
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
