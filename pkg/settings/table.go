package settings

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/victims"
)

// The handler's tuning flags, named for code that sets them.
const (
	FlagPolicy      = "critical-preemption-policy"
	FlagParallelism = "critical-preemption-parallelism"
	FlagMaxReplans  = "critical-preemption-max-replans"
	FlagKillTimeout = "critical-preemption-kill-timeout"

	FlagDeviceReadmissionWindow = "critical-device-readmission-window"
)

// flagPrefixes start every critlet flag (checked by the package's tests):
// an argument with one of them is critlet's, so a misspelt one is refused
// by name rather than passed to the kubelet.
var flagPrefixes = []string{"critical-preemption-", "critical-static-pod-", "critical-device-"}

// setting is one of critlet's flags, declared once.
type setting struct {
	flag string
	// def is the default, as the flag would be given.
	def  string
	help string
	// value binds the flag to its place in s; its Set validates.
	value func(s *Settings) pflag.Value
}

// table lists critlet's settings in the order --help and the settings line
// show them: the handler's tuning, then one switch per opt-in patch.
var table = append([]setting{
	{
		flag:  FlagPolicy,
		def:   string(victims.PolicyUpstream),
		help:  "How victims of a critical pod are chosen: 'upstream' (the stock kubelet's QoS and distance rules) or 'priority' (never a pod of priority p while pods of lower priority can cover the need; then the upstream rules).",
		value: func(s *Settings) pflag.Value { return policyValue{&s.Policy} },
	},
	{
		// 8 covers every victim of a typical admission at once (a node of
		// 110 pods rarely gives up more than a few) while bounding the stop
		// requests a large preemption sends the runtime at the same moment.
		flag:  FlagParallelism,
		def:   "8",
		help:  fmt.Sprintf("How many victims are terminated at once, 1 to %d; 1 terminates them one after another as the stock kubelet does.", MaxParallelism),
		value: func(s *Settings) pflag.Value { return intIn{&s.Parallelism, 1, MaxParallelism} },
	},
	{
		flag:  FlagMaxReplans,
		def:   "0",
		help:  fmt.Sprintf("How many times, 0 to %d, further victims are chosen when victims fail to terminate; 0 (default) admits the critical pod regardless, as the stock kubelet does.", MaxReplans),
		value: func(s *Settings) pflag.Value { return intIn{&s.MaxReplans, 0, MaxReplans} },
	},
	{
		flag:  FlagKillTimeout,
		def:   "0s",
		help:  "How long admission waits for one victim before counting it as failed (the kubelet keeps terminating it), never less than the victim's grace period plus 2s; 0 waits as long as the kubelet's pod workers do.",
		value: func(s *Settings) pflag.Value { return durationIn{&s.KillTimeout, MaxKillTimeout} },
	},
	{
		// Long enough for a node's device plugins to start after a reboot
		// (their images pulled, their devices probed), short enough that a
		// pod whose plugin never comes back is refused within minutes.
		flag: FlagDeviceReadmissionWindow,
		def:  "5m",
		help: fmt.Sprintf("With --critical-device-readmission, how long after the kubelet starts a pod refused for a device plugin that is not back yet is held rather than failed, %s to %s.", MinDeviceReadmissionWindow, MaxDeviceReadmissionWindow),
		value: func(s *Settings) pflag.Value {
			return durationBetween{&s.DeviceReadmissionWindow, MinDeviceReadmissionWindow, MaxDeviceReadmissionWindow}
		},
	},
}, switches()...)

// switches declares the opt-in switch of every patch with a Setting: off by
// default, its help the patch's own.
func switches() []setting {
	var out []setting
	for i, p := range patched.Patches {
		if p.Setting == "" {
			continue
		}
		out = append(out, setting{
			flag:  p.Setting,
			def:   "false",
			help:  p.SettingHelp,
			value: func(s *Settings) pflag.Value { return patchSwitch{s, i} },
		})
	}
	return out
}

// switchIndex is p's bit in Settings.switches, or -1 when p is not
// declared.
func switchIndex(p patched.Patch) int {
	for i, q := range patched.Patches {
		if q.Name == p.Name {
			return i
		}
	}
	return -1
}

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

// durationBetween is a duration flag limited to [min, max].
type durationBetween struct {
	p        *time.Duration
	min, max time.Duration
}

func (v durationBetween) String() string { return v.p.String() }
func (v durationBetween) Type() string   { return "duration" }
func (v durationBetween) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < v.min || d > v.max {
		return fmt.Errorf("%s is out of range: want %s to %s", d, v.min, v.max)
	}
	*v.p = d
	return nil
}

// intIn is an integer flag limited to [min, max].
type intIn struct {
	p        *int
	min, max int
}

func (v intIn) String() string { return strconv.Itoa(*v.p) }
func (v intIn) Type() string   { return "int" }
func (v intIn) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	if n < v.min || n > v.max {
		return fmt.Errorf("%d is out of range: want %d to %d", n, v.min, v.max)
	}
	*v.p = n
	return nil
}

// durationIn is a duration flag limited to [0, max]; 0 means the pod
// workers' own wait.
type durationIn struct {
	p   *time.Duration
	max time.Duration
}

func (v durationIn) String() string { return v.p.String() }
func (v durationIn) Type() string   { return "duration" }
func (v durationIn) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 || d > v.max {
		return fmt.Errorf("%s is out of range: want 0 (as the pod workers) to %s", d, v.max)
	}
	*v.p = d
	return nil
}

// patchSwitch is the boolean flag of patched.Patches[i].
type patchSwitch struct {
	s *Settings
	i int
}

func (v patchSwitch) String() string { return strconv.FormatBool(v.s.switches&(1<<v.i) != 0) }
func (v patchSwitch) Type() string   { return "bool" }
func (v patchSwitch) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	*v.s = v.s.With(patched.Patches[v.i], on)
	return nil
}
