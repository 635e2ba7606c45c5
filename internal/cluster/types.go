// Package cluster makes machines on this host and a Kubernetes cluster of
// them: each machine a root file system built from Debian's packages,
// booted by systemd-nspawn with systemd as PID 1, in a network namespace
// of its own plugged into a bridge that only the machines share. Nothing
// is changed on the host but what a Record lists, and Down removes it.
//
// What a machine is made of is worked out without side effects (its
// cgroups from the host's hierarchies, its files, systemd-nspawn's
// arguments) and then made; each thing made on the host is written to the
// Record before it is made (a process as soon as it runs), so that a run
// that fails half-way is removed whole by Down.
package cluster

import (
	"strconv"

	"github.com/critlet/critlet/internal/localnode/process"
)

// Network is the machines' network: a bridge in a namespace of its own.
const (
	// Subnet holds the hub's and the machines' addresses: test hosts in
	// namespaces this package made, never the host's.
	hubAddr   = "10.250.0.1"
	subnetLen = 24
	// podSubnets: machine i's pods get 10.251.i.0/24.
	podSubnetPrefix = "10.251."
)

// MachineAddr is machine i's address (i from 1).
func MachineAddr(i int) string { return "10.250.0." + strconv.Itoa(10+i) }

// Machine is one machine of the cluster as recorded.
type Machine struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	Addr  string `json:"addr"`
	// NIC holds the machine's network namespace across its boots.
	NIC process.Ref `json:"nic"`
	// Boot is the running systemd-nspawn, absent when powered off.
	Boot *process.Ref `json:"boot,omitempty"`
	// Cgroups are the machine's own, one per hierarchy, which it boots in.
	Cgroups []string `json:"cgroups"`
	// CgroupsMade are those of Cgroups this package made: each recorded
	// before it is made, and taken off again if it turns out to exist.
	// Down removes these, never one it found.
	CgroupsMade []string `json:"cgroups_made,omitempty"`
	// Boots counts the machine's boots.
	Boots int `json:"boots"`
}

// Record is everything this package made on the host, written before each
// thing is made: Down removes what it lists and nothing else.
type Record struct {
	Hub      *process.Ref `json:"hub,omitempty"`
	Machines []*Machine   `json:"machines"`
	// HostDirs are directories systemd-nspawn makes under /run that were
	// absent before the first boot: removed at Down when empty.
	HostDirs []string `json:"host_dirs"`
}
