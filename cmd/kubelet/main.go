// The kubelet command: upstream's kubelet, with critlet's critical-pod
// admission handler linked in place of upstream's by the build's overlay.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream's main
	"k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/critlet/critlet/pkg/patched"
)

func main() {
	// A plain 'go build' links upstream's packages unchanged; such a binary
	// must never run under critlet's name.
	if err := patched.Verify(); err != nil {
		fmt.Fprintf(os.Stderr, "critlet kubelet: %v\n", err)
		os.Exit(3)
	}
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
