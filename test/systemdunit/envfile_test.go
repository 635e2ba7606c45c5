package systemdunit

import (
	"reflect"
	"testing"
)

func TestParseEnvironmentFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Assignment
	}{
		{"kubeadm-flags.env", `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n",
			[]Assignment{{"KUBELET_KUBEADM_ARGS", "--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"}}},
		{"empty value", "KUBELET_EXTRA_ARGS=\n", []Assignment{{"KUBELET_EXTRA_ARGS", ""}}},
		{"comments only at line start", "# a comment\n; another\nA=b # not a comment\n", []Assignment{{"A", "b # not a comment"}}},
		{"whitespace around", "  A =  x y  \t\nB=\n", []Assignment{{"A", "x y"}, {"B", ""}}},
		{"single quotes are literal", `A='$x \" y'` + "\n", []Assignment{{"A", `$x \" y`}}},
		{"double quotes escape only some", `A="a\"b\\c\$d\e"`, []Assignment{{"A", `a"b\c$d\e`}}},
		{"quoted whitespace kept", `A="  x  "`, []Assignment{{"A", "  x  "}}},
		{"text after the closing quote", `A="x y"z`, []Assignment{{"A", "x yz"}}},
		{"continuation", "A=one \\\ntwo\nB=\"x\\\ny\"\n", []Assignment{{"A", "one two"}, {"B", "xy"}}},
		{"unquoted backslash", `A=a\ b\\c`, []Assignment{{"A", `a b\c`}}},
		{"later wins is the caller's", "A=1\nA=2\n", []Assignment{{"A", "1"}, {"A", "2"}}},
		{"no final newline", "A=1", []Assignment{{"A", "1"}}},
		{"blank file", "\n\n  \n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEnvironmentFile(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseEnvironmentFileErrors(t *testing.T) {
	for _, in := range []string{
		"JUSTAWORD\n",
		"1A=x\n",
		"A-B=x\n",
		`A="unterminated` + "\n",
		"A='unterminated\n",
		"export A=x\n",
	} {
		if got, err := ParseEnvironmentFile(in); err == nil {
			t.Errorf("%q: parsed as %q, want an error", in, got)
		}
	}
}
