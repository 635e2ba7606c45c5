package settings

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/pkg/patched"
	"github.com/critlet/critlet/pkg/victims"
)

func TestFromArgsSplitsAndOverrides(t *testing.T) {
	env := map[string]string{"CRITLET_PREEMPTION_POLICY": "priority", "CRITLET_PREEMPTION_PARALLELISM": "4"}
	args := []string{"--config=/etc/kubelet.yaml", "--critical-preemption-parallelism", "2", "--v=2",
		"--critical-preemption-kill-timeout=30s", "--kubeconfig", "/etc/kubeconfig"}
	o, rest, err := FromArgs(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if o.Policy != victims.PolicyPriority || o.Parallelism != 2 || o.KillTimeout.String() != "30s" || o.MaxReplans != Defaults().MaxReplans {
		t.Fatalf("settings %+v: want priority from the environment, parallelism 2 from the flag over the environment, 30s", o)
	}
	if got := strings.Join(rest, " "); got != "--config=/etc/kubelet.yaml --v=2 --kubeconfig /etc/kubeconfig" {
		t.Fatalf("kubelet args %q", got)
	}
}

func TestDefaultsAndUpstreamAreValid(t *testing.T) {
	for _, o := range []Settings{Defaults(), Upstream()} {
		if err := o.Validate(); err != nil {
			t.Fatalf("%v: %v", o, err)
		}
	}
	if u := Upstream(); u.Policy != victims.PolicyUpstream || u.Parallelism != 1 || u.MaxReplans != 0 || u.KillTimeout != 0 {
		t.Fatalf("Upstream() = %+v: must reproduce the stock kubelet", u)
	}
}

func TestStaticPodReadmissionForms(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    bool
		rest    string
		wantErr string
	}{
		{name: "default off", args: []string{"--v=2"}, rest: "--v=2"},
		{name: "bare flag takes no value", args: []string{"--critical-static-pod-readmission", "--v=2"}, want: true, rest: "--v=2"},
		{name: "bare flag last", args: []string{"--v=2", "--critical-static-pod-readmission"}, want: true, rest: "--v=2"},
		{name: "explicit true", args: []string{"--critical-static-pod-readmission=true"}, want: true},
		{name: "flag off over environment on", args: []string{"--critical-static-pod-readmission=false"}, env: map[string]string{"CRITLET_STATIC_POD_READMISSION": "true"}},
		{name: "environment", env: map[string]string{"CRITLET_STATIC_POD_READMISSION": "1"}, want: true},
		{name: "bad environment", env: map[string]string{"CRITLET_STATIC_POD_READMISSION": "yes please"}, wantErr: "CRITLET_STATIC_POD_READMISSION"},
		{name: "bad value", args: []string{"--critical-static-pod-readmission=sometimes"}, wantErr: "sometimes"},
		{name: "misspelt", args: []string{"--critical-static-pod-readmision"}, wantErr: "critical-static-pod-readmision"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, rest, err := FromArgs(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.On(patched.StaticPodReadmission) != tc.want || strings.Join(rest, " ") != tc.rest {
				t.Fatalf("readmission %v, rest %q; want %v, %q", o.On(patched.StaticPodReadmission), rest, tc.want, tc.rest)
			}
		})
	}
}

func TestEveryPatchSettingIsAFlag(t *testing.T) {
	for _, p := range patched.Patches {
		if p.Setting == "" {
			if !Defaults().On(p) {
				t.Errorf("patch %s has no setting but is off", p.Name)
			}
			continue
		}
		if !slices.Contains(Flags(), p.Setting) {
			t.Errorf("patch %s is turned on by --%s, which is not one of critlet's flags", p.Name, p.Setting)
		}
		if Defaults().On(p) {
			t.Errorf("patch %s is on by default; every patch with a setting must be opt-in", p.Name)
		}
	}
	o := Defaults()
	o = o.With(patched.StaticPodReadmission, true)
	if got := strings.Join(o.PatchesOn(), ","); got != "critical-pod-admission,static-pod-readmission" {
		t.Errorf("PatchesOn with readmission = %s", got)
	}
	o = o.With(patched.PreemptionResume, true).With(patched.OutageRecovery, true)
	if got := strings.Join(o.PatchesOn(), ","); got != "critical-pod-admission,static-pod-readmission,preemption-resume,outage-recovery" {
		t.Errorf("PatchesOn with every setting on = %s", got)
	}
}

// Each opt-in switch is off by default and turned on alike by its bare
// flag, by flag=true and by its variable; the flag wins over the variable.
func TestOptInSwitches(t *testing.T) {
	var switches []struct {
		flag string
		get  func(Settings) bool
	}
	for _, p := range patched.Patches {
		if p.Setting != "" {
			switches = append(switches, struct {
				flag string
				get  func(Settings) bool
			}{p.Setting, func(o Settings) bool { return o.On(p) }})
		}
	}
	if len(switches) < 3 {
		t.Fatalf("%d opt-in switches; the patches declare at least 3", len(switches))
	}
	for _, sw := range switches {
		env := func(m map[string]string) func(string) (string, bool) {
			return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
		}
		for _, tc := range []struct {
			args []string
			env  map[string]string
			want bool
		}{
			{nil, nil, false},
			{[]string{"--" + sw.flag}, nil, true},
			{[]string{"--" + sw.flag + "=true"}, nil, true},
			{nil, map[string]string{EnvVar(sw.flag): "true"}, true},
			{[]string{"--" + sw.flag + "=false"}, map[string]string{EnvVar(sw.flag): "true"}, false},
		} {
			o, rest, err := FromArgs(append(tc.args, "--v=2"), env(tc.env))
			if err != nil || sw.get(o) != tc.want || strings.Join(rest, " ") != "--v=2" {
				t.Errorf("%v with env %v: %v, rest %q, err %v; want %v", tc.args, tc.env, sw.get(o), rest, err, tc.want)
			}
		}
		if _, _, err := FromArgs([]string{"--" + sw.flag + "=sometimes"}, env(nil)); err == nil {
			t.Errorf("--%s=sometimes accepted", sw.flag)
		}
	}
}

// The table is the one place a setting is declared: every flag starts with
// one of critlet's prefixes (so a misspelling is refused, not passed to the
// kubelet), has help, a variable named after it, and a default that parses;
// the variables are those the packaged settings file and the kubelet's
// operators know.
func TestTableDeclaresEachSettingOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range table {
		if seen[e.flag] {
			t.Errorf("--%s declared twice", e.flag)
		}
		seen[e.flag] = true
		if !slices.ContainsFunc(flagPrefixes, func(p string) bool { return strings.HasPrefix(e.flag, p) }) {
			t.Errorf("--%s starts with none of %v", e.flag, flagPrefixes)
		}
		if e.help == "" {
			t.Errorf("--%s has no help", e.flag)
		}
		var s Settings
		if err := e.value(&s).Set(e.def); err != nil {
			t.Errorf("--%s: default %q: %v", e.flag, e.def, err)
		}
	}
	want := map[string]string{
		FlagPolicy:                            "CRITLET_PREEMPTION_POLICY",
		FlagParallelism:                       "CRITLET_PREEMPTION_PARALLELISM",
		FlagMaxReplans:                        "CRITLET_PREEMPTION_MAX_REPLANS",
		FlagKillTimeout:                       "CRITLET_PREEMPTION_KILL_TIMEOUT",
		"critical-preemption-resume":          "CRITLET_PREEMPTION_RESUME",
		"critical-preemption-outage-recovery": "CRITLET_PREEMPTION_OUTAGE_RECOVERY",
		"critical-static-pod-readmission":     "CRITLET_STATIC_POD_READMISSION",
		"critical-preemption-devices":         "CRITLET_PREEMPTION_DEVICES",
		"critical-device-readmission":         "CRITLET_DEVICE_READMISSION",
		FlagDeviceReadmissionWindow:           "CRITLET_DEVICE_READMISSION_WINDOW",
	}
	for flag, env := range want {
		if !seen[flag] {
			t.Errorf("--%s is not declared", flag)
		}
		if got := EnvVar(flag); got != env {
			t.Errorf("EnvVar(%s) = %s, want %s", flag, got, env)
		}
	}
	if len(patched.Patches) > 64 {
		t.Errorf("%d patches: Settings keeps one bit per patch in a uint64", len(patched.Patches))
	}
}

// Values out of range are refused by the flag, by the variable and by
// Validate alike, naming the flag; the settings line reads back as the
// same settings.
func TestRangesAndSettingsLine(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	for _, arg := range []string{"--critical-preemption-parallelism=0", "--critical-preemption-parallelism=257",
		"--critical-preemption-max-replans=-1", "--critical-preemption-max-replans=17",
		"--critical-device-readmission-window=999ms", "--critical-device-readmission-window=61m", "--critical-device-readmission-window=0",
		"--critical-preemption-kill-timeout=-1s", "--critical-preemption-kill-timeout=61m",
		"--critical-preemption-policy=fair", "--critical-preemption-parallelism=two"} {
		if _, _, err := FromArgs([]string{arg}, none); err == nil {
			t.Errorf("%s accepted", arg)
		}
	}
	bad := Defaults()
	bad.Parallelism = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--"+FlagParallelism) {
		t.Errorf("Validate of parallelism 0: %v, want an error naming the flag", err)
	}
	s := Defaults().With(patched.OutageRecovery, true)
	s.Policy, s.MaxReplans, s.KillTimeout = victims.PolicyPriority, 3, 90*time.Second
	back, rest, err := FromArgs(strings.Fields(s.String()), none)
	if err != nil || len(rest) != 0 || back != s {
		t.Errorf("the settings line %q read back as %v (rest %q, err %v)", s.String(), back, rest, err)
	}
}
