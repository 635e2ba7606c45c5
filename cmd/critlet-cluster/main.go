// Command critlet-cluster makes a cluster of machines on this host, each
// booted with systemd and bootstrapped with kubeadm, critlet installed
// from its package (docs/cluster.md).
//
//	critlet-cluster up [--state D] [--stock NAME]   three machines, kubeadm init and join
//	critlet-cluster down [--state D]                everything up made, removed
//	critlet-cluster kubectl ARGS...                 kubectl on the control-plane machine
//	critlet-cluster exec NAME CMD...                a command in machine NAME
//	critlet-cluster poweroff|boot NAME              a machine's power
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "critlet-cluster:", err)
		os.Exit(1)
	}
}

const usage = "usage: critlet-cluster up|down|status|kubectl ARGS|exec NAME CMD|poweroff NAME|boot NAME [--state DIR]"

func run(args []string) error {
	if len(args) < 1 {
		return errors.New(usage)
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("critlet-cluster "+verb, flag.ContinueOnError)
	state := fs.String("state", "_output/cluster", "the cluster's state directory")
	cache := fs.String("image-cache", "_output/cluster-image", "where the machine image is kept between clusters")
	bin := fs.String("bin", "_output/bin", "kubeadm, kubectl, the control plane, the stock kubelet and nfpm")
	packages := fs.String("packages", "_output/package", "critlet's .deb")
	stock := fs.String("stock", "", "a worker that gets the stock kubelet's package instead of critlet's (n2 or n3)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Open(*state)
	if err != nil {
		return err
	}
	machine := func() (string, error) {
		if len(rest) == 0 {
			return "", fmt.Errorf("%s needs a machine's name", verb)
		}
		return rest[0], nil
	}
	switch verb {
	case "up":
		repo, err := os.Getwd()
		if err != nil {
			return err
		}
		nodes := []cluster.Node{{Name: "n1", Critlet: true}, {Name: "n2", Critlet: true}, {Name: "n3", Critlet: true}}
		for i := range nodes {
			if i > 0 && nodes[i].Name == *stock {
				nodes[i].Critlet = false
			}
		}
		_, err = c.Up(ctx, cluster.Inputs{Repo: repo, BinDir: *bin, PackageDir: *packages, ImageCache: *cache}, nodes,
			func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) })
		var refused *cluster.HostError
		if errors.As(err, &refused) {
			return err // refused before anything was made
		}
		if err != nil {
			return fmt.Errorf("%w\n(what was made is recorded in %s; critlet-cluster down removes it)", err, *state)
		}
		fmt.Fprintf(os.Stderr, "cluster up: critlet-cluster kubectl get nodes; critlet-cluster down removes it\n")
		return nil
	case "down":
		return c.Down(ctx)
	case "status":
		for _, m := range c.Machines() {
			s := "powered off"
			if m.Boot != nil && m.Boot.Alive() {
				s = "running"
			}
			fmt.Printf("%s\t%s\t%s\tboots %d\n", m.Name, m.Addr, s, m.Boots)
		}
		return nil
	case "kubectl":
		out, err := c.Kubectl(ctx, "n1", rest...)
		fmt.Print(out)
		return err
	case "exec":
		name, err := machine()
		if err != nil {
			return err
		}
		out, err := c.Exec(ctx, name, rest[1:]...)
		fmt.Print(out)
		return err
	case "poweroff":
		name, err := machine()
		if err != nil {
			return err
		}
		return c.PowerOff(ctx, name)
	case "boot":
		name, err := machine()
		if err != nil {
			return err
		}
		return c.Boot(ctx, name)
	}
	return fmt.Errorf("unknown command %q; %s", verb, usage)
}
