// Package options holds critlet's settings: their flags, environment
// variables, defaults and validation, for critical-pod admission and for the
// other patches of pkg/patched.
//
// The kubelet builds its admission handler inside NewMainKubelet with a
// fixed signature, so the kubelet main parses these settings before the
// kubelet starts and publishes them with Set; the handler reads them with
// Current when it is built.
package options

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
	"github.com/critlet/critlet/pkg/patched"
)

// Options are the settings of critical-pod admission.
type Options struct {
	// Policy ranks victims.
	Policy victims.Policy
	// Parallelism is how many victims are terminated at once.
	Parallelism int
	// MaxReplans bounds the rounds of further victims chosen when victims
	// fail to terminate; 0 (the default) keeps the stock behaviour of
	// admitting anyway. Re-planning takes more pods than the stock kubelet
	// would; it suits nodes whose runtime can fail to stop containers, where
	// a victim that is never stopped would otherwise leave the critical pod
	// short.
	MaxReplans int
	// KillTimeout bounds how long admission waits for one victim, but never
	// to less than the victim's grace period plus a 2s allowance for the
	// forced stop; the kubelet keeps terminating it afterwards, but its
	// resources no longer count as freed. 0 waits as long as the kubelet's
	// pod workers do (1.5 times the grace period, at least 10s).
	KillTimeout time.Duration
	// StaticPodReadmission turns on the static-pod-readmission patch: a
	// static pod refused at admission is admitted again once it can be.
	// Off, the kubelet never retries it, as the stock kubelet.
	StaticPodReadmission bool
	// Resume turns on the preemption-resume patch: each preemption's victims
	// are recorded in a checkpoint under the kubelet's root directory before
	// the first is killed, and a kubelet restarted mid-preemption continues
	// it (the same victims, their remaining grace, no second Preempting
	// event) instead of starting again. Off, a restarted kubelet preempts
	// anew, as the stock kubelet.
	Resume bool
	// OutageRecovery turns on the outage-recovery patch: a pod's kill that
	// failed because the container runtime was unreachable is retried as
	// soon as the runtime answers (bounded backoff, not the pod workers'
	// 10s) with the grace it has left, admission waits on for such a
	// victim, and a container the runtime briefly lost while its pod was
	// being terminated is not counted as a restart. Off, as the stock
	// kubelet.
	OutageRecovery bool
}

// Limits of the settings; values outside them are refused.
const (
	MaxParallelism = 256
	MaxReplans     = 16
	MaxKillTimeout = time.Hour
)

// Defaults decide exactly as the stock kubelet does (its ranking, no
// re-planning) and change only how fast victims go: they are terminated
// concurrently. Parallelism 8 covers every victim of a typical admission at
// once (a node of 110 pods rarely gives up more than a few) while bounding
// the stop requests a large preemption sends the container runtime at the
// same moment.
func Defaults() Options {
	return Options{Policy: victims.PolicyUpstream, Parallelism: 8}
}

// Upstream returns settings under which critlet behaves as the stock kubelet
// does: stock ranking, one victim at a time, no re-planning.
func Upstream() Options {
	return Options{Policy: victims.PolicyUpstream, Parallelism: 1}
}

// Validate reports the first setting out of range, naming its flag.
func (o Options) Validate() error {
	if _, err := victims.ParsePolicy(string(o.Policy)); err != nil {
		return fmt.Errorf("--%s: %w", FlagPolicy, err)
	}
	if o.Parallelism < 1 || o.Parallelism > MaxParallelism {
		return fmt.Errorf("--%s: %d is out of range: want 1 to %d", FlagParallelism, o.Parallelism, MaxParallelism)
	}
	if o.MaxReplans < 0 || o.MaxReplans > MaxReplans {
		return fmt.Errorf("--%s: %d is out of range: want 0 to %d", FlagMaxReplans, o.MaxReplans, MaxReplans)
	}
	if o.KillTimeout < 0 || o.KillTimeout > MaxKillTimeout {
		return fmt.Errorf("--%s: %s is out of range: want 0 (as the pod workers) to %s", FlagKillTimeout, o.KillTimeout, MaxKillTimeout)
	}
	return nil
}

// The flags, and the environment variables that set the same values for
// bootstrap scripts that cannot change the kubelet's command line. A flag
// wins over its variable.
const (
	FlagPolicy      = "critical-preemption-policy"
	FlagParallelism = "critical-preemption-parallelism"
	FlagMaxReplans  = "critical-preemption-max-replans"
	FlagKillTimeout = "critical-preemption-kill-timeout"

	FlagResume         = "critical-preemption-resume"
	FlagOutageRecovery = "critical-preemption-outage-recovery"

	FlagStaticPodReadmission = "critical-static-pod-readmission"
)

// flagPrefixes start every critlet flag: an argument with one of them is
// critlet's, so a misspelt one is refused by name rather than passed to the
// kubelet.
var flagPrefixes = []string{"--critical-preemption-", "--critical-static-pod-"}

var envOf = map[string]string{
	FlagPolicy:      "CRITLET_PREEMPTION_POLICY",
	FlagParallelism: "CRITLET_PREEMPTION_PARALLELISM",
	FlagMaxReplans:  "CRITLET_PREEMPTION_MAX_REPLANS",
	FlagKillTimeout: "CRITLET_PREEMPTION_KILL_TIMEOUT",

	FlagResume:         "CRITLET_PREEMPTION_RESUME",
	FlagOutageRecovery: "CRITLET_PREEMPTION_OUTAGE_RECOVERY",

	FlagStaticPodReadmission: "CRITLET_STATIC_POD_READMISSION",
}

// Flags returns critlet's flag names, in the order --help lists them.
func Flags() []string {
	return []string{FlagPolicy, FlagParallelism, FlagMaxReplans, FlagKillTimeout, FlagResume, FlagOutageRecovery, FlagStaticPodReadmission}
}

// EnvVar returns the environment variable that stands for flag.
func EnvVar(flag string) string { return envOf[flag] }

type policyValue struct{ p *victims.Policy }

func (v policyValue) String() string { return string(*v.p) }
func (v policyValue) Type() string   { return "string" }
func (v policyValue) Set(s string) error {
	p, err := victims.ParsePolicy(s)
	if err != nil {
		return err
	}
	*v.p = p
	return nil
}

// FlagSet returns critlet's flags bound to o, for parsing and for --help.
func FlagSet(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("critlet", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Var(policyValue{&o.Policy}, FlagPolicy, fmt.Sprintf(
		"How victims of a critical pod are chosen: 'upstream' (the stock kubelet's QoS and distance rules) or 'priority' (never a pod of priority p while pods of lower priority can cover the need; then the upstream rules). Env %s.", envOf[FlagPolicy]))
	fs.IntVar(&o.Parallelism, FlagParallelism, o.Parallelism, fmt.Sprintf(
		"How many victims are terminated at once, 1 to %d; 1 terminates them one after another as the stock kubelet does. Env %s.", MaxParallelism, envOf[FlagParallelism]))
	fs.IntVar(&o.MaxReplans, FlagMaxReplans, o.MaxReplans, fmt.Sprintf(
		"How many times, 0 to %d, further victims are chosen when victims fail to terminate; 0 (default) admits the critical pod regardless, as the stock kubelet does. Env %s.", MaxReplans, envOf[FlagMaxReplans]))
	fs.DurationVar(&o.KillTimeout, FlagKillTimeout, o.KillTimeout, fmt.Sprintf(
		"How long admission waits for one victim before counting it as failed (the kubelet keeps terminating it), never less than the victim's grace period plus 2s; 0 waits as long as the kubelet's pod workers do. Env %s.", envOf[FlagKillTimeout]))
	fs.BoolVar(&o.Resume, FlagResume, o.Resume, fmt.Sprintf(
		"Record each preemption's victims in a checkpoint under the kubelet's root directory before the first is killed, so a kubelet restarted mid-preemption continues it: the same victims, their remaining grace period, no second Preempting event; off (default), it preempts anew, as the stock kubelet. Env %s.", envOf[FlagResume]))
	fs.BoolVar(&o.OutageRecovery, FlagOutageRecovery, o.OutageRecovery, fmt.Sprintf(
		"Retry a pod's kill that failed because the container runtime was unreachable as soon as it answers (backoff 250ms doubling to the pod workers' 10s), with the grace it has left, rather than after the pod workers' 10s with a new grace, let admission wait on for such a victim, and never count a container the runtime lost while its pod was being terminated as a restart; off (default), as the stock kubelet. Env %s.", envOf[FlagOutageRecovery]))
	fs.BoolVar(&o.StaticPodReadmission, FlagStaticPodReadmission, o.StaticPodReadmission, fmt.Sprintf(
		"Admit a static pod again, through the same admit handlers, once a pod active at its refusal has left or its backoff (2s doubling to 1m) has expired; off (default), a refused static pod stays Failed until the kubelet restarts, as with the stock kubelet. Env %s.", envOf[FlagStaticPodReadmission]))
	return fs
}

// FromArgs returns the settings given by the environment (through lookup)
// and by critlet's flags in args, and args without those flags, for the
// kubelet to parse. Flags take the forms --name=value and --name value.
func FromArgs(args []string, lookup func(string) (string, bool)) (Options, []string, error) {
	o := Defaults()
	fs := FlagSet(&o)
	for _, flag := range Flags() {
		if v, ok := lookup(envOf[flag]); ok {
			if err := fs.Set(flag, v); err != nil {
				return o, nil, fmt.Errorf("%s=%q (for --%s): %w", envOf[flag], v, flag, err)
			}
		}
	}
	var ours, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if !slices.ContainsFunc(flagPrefixes, func(p string) bool { return strings.HasPrefix(a, p) }) {
			rest = append(rest, a)
			continue
		}
		ours = append(ours, a)
		// A boolean flag alone means true; it takes no following value.
		if f := fs.Lookup(strings.TrimPrefix(a, "--")); f != nil && f.NoOptDefVal != "" {
			continue
		}
		if !strings.Contains(a, "=") {
			if i+1 >= len(args) {
				return o, nil, fmt.Errorf("%s needs a value", a)
			}
			i++
			ours = append(ours, args[i])
		}
	}
	if err := fs.Parse(ours); err != nil {
		return o, nil, err
	}
	return o, rest, o.Validate()
}

var (
	mu      sync.Mutex
	current = Defaults()
)

// Set publishes the settings for the handler to read.
func Set(o Options) {
	mu.Lock()
	defer mu.Unlock()
	current = o
}

// Current returns the published settings, or the defaults.
func Current() Options {
	mu.Lock()
	defer mu.Unlock()
	return current
}

// String renders o as flags.
func (o Options) String() string {
	return fmt.Sprintf("--%s=%s --%s=%s --%s=%s --%s=%s --%s=%t --%s=%t --%s=%t",
		FlagPolicy, o.Policy, FlagParallelism, strconv.Itoa(o.Parallelism),
		FlagMaxReplans, strconv.Itoa(o.MaxReplans), FlagKillTimeout, o.KillTimeout,
		FlagResume, o.Resume, FlagOutageRecovery, o.OutageRecovery,
		FlagStaticPodReadmission, o.StaticPodReadmission)
}

// On reports whether patch p is on under o. A patch without a setting is
// always on (its defaults decide as the stock kubelet does).
func (o Options) On(p patched.Patch) bool {
	switch p.Setting {
	case "":
		return true
	case FlagStaticPodReadmission:
		return o.StaticPodReadmission
	case FlagResume:
		return o.Resume
	case FlagOutageRecovery:
		return o.OutageRecovery
	default:
		return false
	}
}

// PatchesOn returns the names of the declared patches on under o.
func (o Options) PatchesOn() []string {
	var on []string
	for _, p := range patched.Patches {
		if o.On(p) {
			on = append(on, p.Name)
		}
	}
	return on
}

// SetFromEnvironment publishes the settings the CRITLET_* variables give,
// as the kubelet main would: the patches' tests in upstream's package use
// it, so upstream's own tests there run with the patches on or off
// (hack/test-patched-kubelet.sh).
func SetFromEnvironment() error {
	o, _, err := FromArgs(nil, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("critlet's settings from the environment: %w", err)
	}
	Set(o)
	return nil
}
