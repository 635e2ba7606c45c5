// The kubelet command: upstream's kubelet, with critlet's critical-pod
// admission handler linked in place of upstream's by the build's overlay,
// and critlet's own flags taken off the command line before upstream's
// kubelet parses the rest.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream's main
	"k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/critlet/critlet/pkg/kubeletstate"
	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/settings"
)

// Exit codes besides the kubelet's own.
const (
	exitBadFlags  = 2
	exitUnpatched = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stderr, startKubelet))
}

// run checks critlet's settings and the build, then hands the remaining
// arguments to start. Nothing starts when either check fails.
func run(args []string, lookupEnv func(string) (string, bool), stderr io.Writer, start func([]string, settings.Settings) int) int {
	opts, rest, err := settings.FromArgs(args, lookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "critlet kubelet: invalid setting: %v\n", err)
		return exitBadFlags
	}
	// A plain 'go build' links upstream's packages unchanged; such a binary
	// must never run under critlet's name.
	if err := patched.Verify(); err != nil {
		fmt.Fprintf(stderr, "critlet kubelet: %v\n", err)
		return exitUnpatched
	}
	return start(rest, opts)
}

func startKubelet(args []string, opts settings.Settings) int {
	kubeletstate.SetSettings(opts)
	cmd := app.NewKubeletCommand(context.Background())
	cmd.SetArgs(args)
	upstreamHelp := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, a []string) {
		upstreamHelp(c, a)
		shown := settings.Defaults()
		fmt.Fprintf(c.OutOrStdout(), "\ncritlet critical-pod admission flags:\n%s", settings.FlagSet(&shown).FlagUsagesWrapped(2))
	})
	return cli.Run(cmd)
}
