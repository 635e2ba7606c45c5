package options

import (
	"slices"
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
	"github.com/critlet/critlet/pkg/patched"
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
	for _, o := range []Options{Defaults(), Upstream()} {
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
			if o.StaticPodReadmission != tc.want || strings.Join(rest, " ") != tc.rest {
				t.Fatalf("readmission %v, rest %q; want %v, %q", o.StaticPodReadmission, rest, tc.want, tc.rest)
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
	o.StaticPodReadmission = true
	if got := strings.Join(o.PatchesOn(), ","); got != "critical-pod-admission,static-pod-readmission" {
		t.Errorf("PatchesOn with readmission = %s", got)
	}
	o.Resume, o.OutageRecovery = true, true
	if got := strings.Join(o.PatchesOn(), ","); got != "critical-pod-admission,static-pod-readmission,preemption-resume,outage-recovery" {
		t.Errorf("PatchesOn with every setting on = %s", got)
	}
}

// Each opt-in switch is off by default and turned on alike by its bare
// flag, by flag=true and by its variable; the flag wins over the variable.
func TestOptInSwitches(t *testing.T) {
	for _, sw := range []struct {
		flag string
		get  func(Options) bool
	}{
		{FlagResume, func(o Options) bool { return o.Resume }},
		{FlagOutageRecovery, func(o Options) bool { return o.OutageRecovery }},
		{FlagStaticPodReadmission, func(o Options) bool { return o.StaticPodReadmission }},
	} {
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
