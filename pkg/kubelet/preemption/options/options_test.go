package options

import (
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/kubelet/preemption/victims"
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
