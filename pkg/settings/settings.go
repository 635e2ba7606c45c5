// Package settings holds critlet's settings: what each is, its flag and
// environment variable, its default, its validation and its help, declared
// once in a table (table.go) from which the flag set, the environment, the
// settings line and the patches' switches are all read.
//
// There are two kinds. The handler's tuning settings (the policy, the
// parallelism, re-planning, the kill timeout) are table entries bound to
// fields of Settings. Every patch declared with a Setting in pkg/patched
// gets an opt-in switch of that name, off by default, with the patch's
// SettingHelp: adding such a patch needs no change here.
//
// The package is pure: parsing and rendering. The settings a running
// kubelet uses are published in pkg/kubeletstate.
package settings

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/victims"
)

// Settings are critlet's settings. The zero value is not valid: start from
// Defaults.
type Settings struct {
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
	// DeviceReadmissionWindow is how long after the kubelet starts a pod
	// refused for a device plugin that is not back yet is held, with
	// device-readmission on.
	DeviceReadmissionWindow time.Duration
	// switches has bit i set when patched.Patches[i], an opt-in patch, is
	// on. A bit set keeps Settings comparable and safe to copy.
	switches uint64
}

// Limits of the settings; values outside them are refused.
const (
	MaxParallelism = 256
	MaxReplans     = 16
	MaxKillTimeout = time.Hour

	MinDeviceReadmissionWindow = time.Second
	MaxDeviceReadmissionWindow = time.Hour
)

// Defaults are the table's defaults: decisions exactly as the stock
// kubelet's, every opt-in patch off.
func Defaults() Settings {
	var s Settings
	for _, e := range table {
		if err := e.value(&s).Set(e.def); err != nil {
			panic(fmt.Sprintf("settings: the default of --%s: %v", e.flag, err))
		}
	}
	return s
}

// Upstream returns settings under which critlet behaves as the stock kubelet
// does: stock ranking, one victim at a time, no re-planning.
func Upstream() Settings {
	s := Defaults()
	s.Parallelism = 1
	return s
}

// On reports whether patch p is on under s. A patch without a setting is
// always on (its defaults decide as the stock kubelet does).
func (s Settings) On(p patched.Patch) bool {
	if p.Setting == "" {
		return true
	}
	i := switchIndex(p)
	return i >= 0 && s.switches&(1<<i) != 0
}

// With returns s with opt-in patch p turned on or off. It panics for a
// patch that is not declared with a setting: that is a programming error.
func (s Settings) With(p patched.Patch, on bool) Settings {
	i := switchIndex(p)
	if i < 0 || p.Setting == "" {
		panic(fmt.Sprintf("settings: patch %q has no switch", p.Name))
	}
	if on {
		s.switches |= 1 << i
	} else {
		s.switches &^= 1 << i
	}
	return s
}

// PatchesOn returns the names of the declared patches on under s.
func (s Settings) PatchesOn() []string {
	var on []string
	for _, p := range patched.Patches {
		if s.On(p) {
			on = append(on, p.Name)
		}
	}
	return on
}

// Validate reports the first setting out of range, naming its flag: each
// value is read back through its flag's own parsing.
func (s Settings) Validate() error {
	for _, e := range table {
		v := e.value(&s)
		if err := v.Set(v.String()); err != nil {
			return fmt.Errorf("--%s: %w", e.flag, err)
		}
	}
	return nil
}

// String renders s as flags, in the table's order: the kubelet's settings
// line.
func (s Settings) String() string {
	parts := make([]string, len(table))
	for i, e := range table {
		parts[i] = "--" + e.flag + "=" + e.value(&s).String()
	}
	return strings.Join(parts, " ")
}

// Flags returns critlet's flag names, in the order --help lists them.
func Flags() []string {
	names := make([]string, len(table))
	for i, e := range table {
		names[i] = e.flag
	}
	return names
}

// EnvVar returns the environment variable that stands for flag:
// CRITLET_ and the flag without its "critical-" start, in capitals
// (critical-preemption-policy is CRITLET_PREEMPTION_POLICY).
func EnvVar(flag string) string {
	return "CRITLET_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(flag, "critical-"), "-", "_"))
}

// FlagSet returns critlet's flags bound to s, for parsing and for --help.
func FlagSet(s *Settings) *pflag.FlagSet {
	fs := pflag.NewFlagSet("critlet", pflag.ContinueOnError)
	fs.SortFlags = false
	for _, e := range table {
		v := e.value(s)
		f := fs.VarPF(v, e.flag, "", e.help+" Env "+EnvVar(e.flag)+".")
		if v.Type() == "bool" {
			f.NoOptDefVal = "true"
		}
	}
	return fs
}

// FromArgs returns the settings given by the environment (through lookup)
// and by critlet's flags in args, and args without those flags, for the
// kubelet to parse. Flags take the forms --name=value and --name value; a
// flag wins over its variable.
func FromArgs(args []string, lookup func(string) (string, bool)) (Settings, []string, error) {
	s := Defaults()
	fs := FlagSet(&s)
	for _, flag := range Flags() {
		if v, ok := lookup(EnvVar(flag)); ok {
			if err := fs.Set(flag, v); err != nil {
				return s, nil, fmt.Errorf("%s=%q (for --%s): %w", EnvVar(flag), v, flag, err)
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
		if !slices.ContainsFunc(flagPrefixes, func(p string) bool { return strings.HasPrefix(a, "--"+p) }) {
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
				return s, nil, fmt.Errorf("%s needs a value", a)
			}
			i++
			ours = append(ours, args[i])
		}
	}
	if err := fs.Parse(ours); err != nil {
		return s, nil, err
	}
	return s, rest, s.Validate()
}
