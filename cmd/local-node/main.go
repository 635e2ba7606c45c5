// Command local-node runs a single-node cluster on loopback with a chosen
// kubelet: etcd, kube-apiserver, containerd and the kubelet, under one state
// directory.
//
//	local-node up [flags] [-- kubelet flags]   start (or resume) the node and wait until it is Ready
//	local-node down [flags]                    stop it and remove everything it created but its logs
//	local-node status [flags]                  show which components run
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/critlet/critlet/internal/localnode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: local-node up|down|status [flags] [-- kubelet flags]")
		return 2
	}
	cmd := args[0]
	fs := pflag.NewFlagSet("local-node "+cmd, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	state := fs.String("state", "_output/local-node", "state directory: logs, PID files, certificates and all the node's data")
	bin := fs.String("bin", "_output/bin", "directory holding etcd, kube-apiserver and pause")
	kubelet := fs.String("kubelet", "_output/bin/kubelet", "kubelet binary to run")
	nodeName := fs.String("node-name", "critlet-node", "the node's name")
	maxPods := fs.Int("max-pods", 0, "the kubelet's maxPods (0: the kubelet's default)")
	if err := fs.Parse(args[1:]); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stderr, "local-node %s: %v\n", cmd, err)
		}
		return 2
	}
	var cfg localnode.Config
	var err error
	if cfg.StateDir, err = filepath.Abs(*state); err == nil {
		if cfg.BinDir, err = filepath.Abs(*bin); err == nil {
			cfg.Kubelet, err = filepath.Abs(*kubelet)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "local-node: %v\n", err)
		return 2
	}
	cfg.NodeName, cfg.MaxPods, cfg.KubeletFlags = *nodeName, int32(*maxPods), fs.Args()
	if *maxPods < 0 {
		fmt.Fprintf(stderr, "local-node: --max-pods must not be negative, got %d\n", *maxPods)
		return 2
	}

	switch cmd {
	case "up":
		n, err := localnode.Up(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "local-node up: %v\n", err)
			if errors.Is(ctx.Err(), context.Canceled) {
				fmt.Fprintln(stderr, "interrupted: run 'local-node down' to remove what was started")
			}
			return 1
		}
		c := n.Config()
		fmt.Fprintf(stdout, "local node is Ready\n  node:       %s\n  kubelet:    %s %v\n  kubeconfig: %s\n  logs:       %s\n  example:    kubectl --kubeconfig %s get node %s -o wide\n",
			c.NodeName, c.Kubelet, c.KubeletFlags, n.AdminKubeconfig(), filepath.Dir(c.LogFile(localnode.Kubelet)), n.AdminKubeconfig(), c.NodeName)
		return 0
	case "down":
		err := localnode.Down(cfg)
		if errors.Is(err, localnode.ErrNotANode) {
			fmt.Fprintf(stdout, "local-node down: %v\n", err)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "local-node down: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "local node under %s stopped and removed (logs kept)\n", cfg.StateDir)
		return 0
	case "status":
		lines, err := localnode.Status(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "local-node status: %v\n", err)
			return 1
		}
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
		return 0
	default:
		fmt.Fprintf(stderr, "local-node: unknown command %q (want up, down or status)\n", cmd)
		return 2
	}
}
