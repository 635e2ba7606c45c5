// Command critlet-explain says what a node's kubelet would do to admit a
// critical pod: whether it fits, what it lacks, and which pods critical-pod
// preemption would take under each policy, and why.
//
//	critlet-explain --node NAME --pod pod.yaml [--kubeconfig FILE] [--request-timeout 30s]
//	critlet-explain --node-file node.yaml --pods-file pods.yaml --pod pod.yaml
//
// Exit status: 0 the pod fits, 3 bad input, 4 the API server did not
// answer, 5 admitted after preemption, 6 rejected, 128+n ended by signal n
// (130 for an interrupt). 1 and 2 are never used: they are Go's statuses
// for log.Fatal and for a panic.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/internal/explain"
	"github.com/critlet/critlet/pkg/victims"
)

// Exit statuses besides the verdicts' (explain.Verdict.ExitCode).
const (
	// exitBadInput: flags, files, manifests or names the command cannot
	// work with; running it again as is fails again.
	exitBadInput = 3
	// exitCluster: the API server was not reached or did not answer
	// (explain.ClusterError); the same command may work later.
	exitCluster = 4
	// exitInterrupted: ended by SIGINT (or cancelled without a signal).
	// A signal's status is 128 plus its number, as a shell reports a
	// process the signal killed: 143 for SIGTERM.
	exitInterrupted = 130
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-signals
		// A second signal ends the command at once.
		signal.Stop(signals)
		cancel(interrupted{s.(syscall.Signal)})
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// interrupted is the cause of a run ended by a signal.
type interrupted struct{ signal syscall.Signal }

func (i interrupted) Error() string { return "interrupted (" + i.signal.String() + ")" }

// exitCode is the status for err, the failure of a run with ctx.
func exitCode(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		if i, ok := context.Cause(ctx).(interrupted); ok {
			return 128 + int(i.signal)
		}
		return exitInterrupted
	}
	var cluster *explain.ClusterError
	if errors.As(err, &cluster) {
		return exitCluster
	}
	return exitBadInput
}

type flags struct {
	kubeconfig, node, nodeFile, podsFile, pod, policy, output string
	static                                                    bool
	// devicePreemption: explain as a kubelet run with the device patch's
	// setting; notDevices: extended resources without a device plugin.
	devicePreemption bool
	notDevices       []string
	// requestTimeout bounds each request to the API server;
	// requestTimeoutSet: given on the command line.
	requestTimeout    time.Duration
	requestTimeoutSet bool
}

// defaultRequestTimeout is --request-timeout's default: long enough for a
// loaded API server to list a large node's pods, short enough that a
// script learns of a stalled one.
const defaultRequestTimeout = 30 * time.Second

// exitStatuses is --help's list of exit statuses.
func exitStatuses() string {
	return fmt.Sprintf("exit status: %d fits, %d bad input, %d no answer from the API server, %d admitted after preemption, %d rejected, 128+n ended by signal n",
		explain.Fits.ExitCode(), exitBadInput, exitCluster, explain.AdmittedAfterPreemption.ExitCode(), explain.Rejected.ExitCode())
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The kubelet's predicate and client-go log through the context's
	// logger; standard error is the one line below.
	ctx = klog.NewContext(ctx, logr.Discard())
	var f flags
	fs := pflag.NewFlagSet("critlet-explain", pflag.ContinueOnError)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.node, "node", "", "the node, read live from the API server")
	fs.StringVar(&f.nodeFile, "node-file", "", "the node offline, as kubectl get node -o yaml|json writes it")
	fs.StringVar(&f.podsFile, "pods-file", "", "the pods offline, as kubectl get pods -A -o yaml|json writes them (pods of other nodes are ignored)")
	fs.StringVar(&f.pod, "pod", "", "the pod's manifest, as written for kubectl apply; - reads standard input")
	fs.BoolVar(&f.static, "static", false, "the pod is a static pod (critical whatever its priority)")
	fs.BoolVar(&f.devicePreemption, "critical-preemption-devices", false, "explain as a kubelet run with --critical-preemption-devices: a critical pod short of device-plugin devices preempts their holders (default: refused before preemption, as by the stock kubelet)")
	fs.StringSliceVar(&f.notDevices, "not-device-resource", nil, "an extended resource the node advertises without a device plugin, weighed by the admission predicate alone (repeatable); every other extended resource is taken for a device plugin's")
	fs.StringVar(&f.policy, "policy", "", "plan with this policy only: "+policyNames()+" (default: each)")
	fs.StringVarP(&f.output, "output", "o", "text", "output format: "+strings.Join(explain.Formats, ", "))
	fs.DurationVar(&f.requestTimeout, "request-timeout", defaultRequestTimeout, "how long each request to the API server may take, as 10s or 2m; past it the server counts as not answering (exit status 4)")
	// pflag would print usage after every error; errors stay one line here.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage of critlet-explain (%s):\n%s", exitStatuses(), fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "critlet-explain: %s (see --help)\n", oneLine(err.Error()))
		return exitBadInput
	}
	f.requestTimeoutSet = fs.Changed("request-timeout")
	ex, err := explainPod(ctx, f, stdin)
	if ctx.Err() != nil {
		// What failed meanwhile failed for the interrupt, and an answer
		// found meanwhile is no longer awaited.
		err = context.Cause(ctx)
	}
	if err == nil {
		err = explain.Print(stdout, ex, f.output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "critlet-explain: %s\n", oneLine(err.Error()))
		return exitCode(ctx, err)
	}
	return ex.Verdict.ExitCode()
}

func explainPod(ctx context.Context, f flags, stdin io.Reader) (*explain.Explanation, error) {
	if fs := f.output; fs != "text" && fs != "json" && fs != "yaml" {
		return nil, fmt.Errorf("--output: unknown format %q: want one of %s", fs, strings.Join(explain.Formats, ", "))
	}
	offline := f.nodeFile != "" || f.podsFile != ""
	switch {
	case f.pod == "":
		return nil, errors.New("--pod is required")
	case offline && (f.nodeFile == "" || f.podsFile == ""):
		return nil, errors.New("offline, both --node-file and --pods-file are required")
	case offline && (f.node != "" || f.kubeconfig != "" || f.requestTimeoutSet):
		return nil, errors.New("--node-file and --pods-file read the node offline: drop --node, --kubeconfig and --request-timeout")
	case !offline && f.node == "":
		return nil, errors.New("--node (live) or --node-file and --pods-file (offline) is required")
	case f.requestTimeout <= 0:
		return nil, fmt.Errorf("--request-timeout: %s is not a positive duration", f.requestTimeout)
	}
	policies := victims.Policies
	if f.policy != "" {
		p, err := victims.ParsePolicy(f.policy)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		policies = []victims.Policy{p}
	}
	podData, err := readInput("--pod", f.pod, stdin)
	if err != nil {
		return nil, err
	}
	pod, err := explain.DecodePod(podData)
	if err != nil {
		return nil, fmt.Errorf("--pod %s: %w", f.pod, err)
	}
	in := explain.Input{Pod: pod, Static: f.static, Policies: policies, DevicePreemption: f.devicePreemption, NotDevices: f.notDevices}
	var lookup explain.ClassLookup
	if offline {
		if in.Node, in.Pods, err = readOffline(f.nodeFile, f.podsFile); err != nil {
			return nil, err
		}
	} else {
		client, err := clientFor(f.kubeconfig)
		if err != nil {
			return nil, err
		}
		live := explain.Live{Client: client, Timeout: f.requestTimeout}
		if in.Node, err = live.Node(ctx, f.node); err != nil {
			return nil, err
		}
		if in.Pods, err = live.Pods(ctx, f.node); err != nil {
			return nil, err
		}
		lookup = live.Class
	}
	if err := explain.ResolvePriority(ctx, pod, lookup); err != nil {
		return nil, err
	}
	return explain.Explain(ctx, in)
}

func readOffline(nodeFile, podsFile string) (*v1.Node, []*v1.Pod, error) {
	data, err := readInput("--node-file", nodeFile, nil)
	if err != nil {
		return nil, nil, err
	}
	node, err := explain.DecodeNode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("--node-file %s: %w", nodeFile, err)
	}
	if data, err = readInput("--pods-file", podsFile, nil); err != nil {
		return nil, nil, err
	}
	pods, err := explain.DecodePods(data)
	if err != nil {
		return nil, nil, fmt.Errorf("--pods-file %s: %w", podsFile, err)
	}
	return node, pods, nil
}

// clientFor connects as --kubeconfig says; without it in-cluster, else
// through the usual kubeconfig rules ($KUBECONFIG, ~/.kube/config).
func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	}
	if kubeconfig != "" || errors.Is(err, rest.ErrNotInCluster) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	cfg.UserAgent = "critlet-explain"
	cfg.Wrap(limitResponses)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return client, nil
}

func policyNames() string {
	names := make([]string, len(victims.Policies))
	for i, p := range victims.Policies {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
