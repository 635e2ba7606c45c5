package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/internal/explain"
)

const testdata = "../../internal/explain/testdata"

func explainCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func offline(args ...string) []string {
	return append([]string{"--node-file", filepath.Join(testdata, "node.yaml"), "--pods-file", filepath.Join(testdata, "pods.yaml")}, args...)
}

// The agent of testdata lacks 300m cpu (see internal/explain's tests for
// the reasoning): exit 5, the shortfall and each policy's table.
func TestTable(t *testing.T) {
	code, out, errOut := explainCmd(t, "", offline("--pod", filepath.Join(testdata, "agent.yaml"))...)
	if code != 5 || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 5 and nothing", code, errOut)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{
		"Pod kube-system/agent, priority 2000001000 (system-node-critical), on node worker-1 beside 5 active pods.",
		"Verdict: admitted after preemption",
		"SHORTFALL   MISSING   REQUESTED   USED    CAPACITY\ncpu         300m      1500m       2800m   4",
		"Policy upstream: 1 victim(s), in the order they are terminated; they free cpu 1.\nVICTIM        NAMESPACE   QOS         PRIORITY   CPU   MEMORY\nburst-large   shop        Burstable   1000       1     1Gi\n",
		"Policy priority: 1 victim(s), in the order they are terminated; they free cpu 1500m.\nVICTIM   NAMESPACE   QOS          PRIORITY   CPU     MEMORY   DEVICES\nguar-1   shop        Guaranteed   0          1500m   2Gi      example.com/dongle=1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestOutputFormatsAndStdin(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join(testdata, "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for format, want := range map[string]string{
		"json": `"apiVersion": "explain.critlet.io/v1"`,
		"yaml": "verdict: AdmittedAfterPreemption",
	} {
		code, out, errOut := explainCmd(t, string(manifest), offline("--pod", "-", "--policy", "upstream", "-o", format)...)
		if code != 5 || !strings.Contains(out, want) || strings.Contains(out, "priority\n") {
			t.Errorf("-o %s: exit %d, stderr %q, output:\n%s", format, code, errOut, out)
		}
	}
}

func kubeconfig(server string) string {
	return "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"" + server + "\"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	agent := func(cpu string) string {
		return write("agent-"+cpu+".yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: agent, namespace: kube-system}\nspec:\n  priorityClassName: system-node-critical\n  containers: [{name: a, image: a, resources: {requests: {cpu: \""+cpu+"\"}}}]\n")
	}
	// Asked live of a server never reached: the flags are checked first.
	live := func(args ...string) []string {
		return append([]string{"--kubeconfig", write("kubeconfig", kubeconfig("https://127.0.0.1:1")), "--node", "n", "--pod", agent("1")}, args...)
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		// stderr holds this, on one line; empty for a verdict.
		stderr string
	}{
		"fits":                       {offline("--pod", agent("1")), 0, ""},
		"rejected":                   {offline("--pod", agent("5")), 6, ""},
		"unreadable pod file":        {offline("--pod", filepath.Join(dir, "absent.yaml")), 3, "absent.yaml: no such file or directory"},
		"malformed quantity":         {offline("--pod", agent("2 cores")), 3, "quantities must match the regular expression"},
		"wrong kind":                 {[]string{"--node-file", filepath.Join(testdata, "agent.yaml"), "--pods-file", filepath.Join(testdata, "pods.yaml"), "--pod", agent("1")}, 3, "found a Pod, want a Node"},
		"not critical":               {offline("--pod", write("plain.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, image: a}]}\n")), 3, "pod default/web is not critical"},
		"unknown class offline":      {offline("--pod", write("gold.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {priorityClassName: gold, containers: [{name: a, image: a}]}\n")), 3, `priority class "gold" is not a system class`},
		"unknown policy":             {offline("--pod", agent("1"), "--policy", "cheapest"), 3, `unknown preemption policy "cheapest"`},
		"unknown format":             {offline("--pod", agent("1"), "-o", "wide"), 3, `unknown format "wide"`},
		"no pod":                     {offline(), 3, "--pod is required"},
		"half offline":               {[]string{"--node-file", "x", "--pod", agent("1")}, 3, "both --node-file and --pods-file"},
		"no node":                    {[]string{"--pod", agent("1")}, 3, "--node (live)"},
		"unknown flag":               {[]string{"--nodes", "x"}, 3, "unknown flag: --nodes"},
		"stdin for the node":         {[]string{"--node-file", "-", "--pods-file", "-", "--pod", agent("1")}, 3, "only --pod can be read from standard input"},
		"static pod without class":   {offline("--static", "--pod", write("static.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\nspec: {containers: [{name: a, image: a, resources: {requests: {cpu: 1500m}}}]}\n")), 5, ""},
		"unreachable API server":     {[]string{"--kubeconfig", write("kubeconfig", kubeconfig("https://127.0.0.1:1")), "--node", "n", "--pod", agent("1")}, 4, "reading node n"},
		"unreadable kubeconfig":      {[]string{"--kubeconfig", filepath.Join(dir, "absent"), "--node", "n", "--pod", agent("1")}, 3, "absent: no such file or directory"},
		"malformed node name":        {[]string{"--kubeconfig", write("kubeconfig", kubeconfig("https://127.0.0.1:1")), "--node", "Worker_1", "--pod", agent("1")}, 3, `"Worker_1" is not a node name`},
		"two pods for --pod":         {offline("--pod", write("two.yaml", readFile(t, agent("1"))+"---\n"+readFile(t, agent("2")))), 3, "want exactly one Pod, found 2"},
		"two nodes":                  {[]string{"--node-file", write("nodes.yaml", readFile(t, filepath.Join(testdata, "node.yaml"))+"---\n"+readFile(t, filepath.Join(testdata, "node.yaml"))), "--pods-file", filepath.Join(testdata, "pods.yaml"), "--pod", agent("1")}, 3, "want exactly one Node, found 2"},
		"no document in --pods-file": {[]string{"--node-file", filepath.Join(testdata, "node.yaml"), "--pods-file", write("none.yaml", "---\n# no pods\n"), "--pod", agent("1")}, 3, "--pods-file " + filepath.Join(dir, "none.yaml") + ": empty: want a Pod"},
		// 1,000 pods sharing a 1 MiB annotation: 1 GiB decoded from 1 MiB.
		"YAML alias bomb":           {[]string{"--node-file", filepath.Join(testdata, "node.yaml"), "--pods-file", write("bomb.yaml", aliasBomb(1000, 1<<20)), "--pod", agent("1")}, 3, "bomb.yaml: document 1: its aliases expanded, the YAML comes to more than the limit of 64 MiB for YAML"},
		"request timeout of zero":   {live("--request-timeout", "0"), 3, "--request-timeout: 0s is not a positive duration"},
		"negative request timeout":  {live("--request-timeout=-1s"), 3, "--request-timeout: -1s is not a positive duration"},
		"malformed request timeout": {live("--request-timeout", "soon"), 3, `invalid argument "soon" for "--request-timeout" flag`},
		"request timeout unitless":  {live("--request-timeout", "30"), 3, `time: missing unit in duration "30"`},
		"request timeout offline":   {offline("--pod", agent("1"), "--request-timeout", "10s"), 3, "drop --node, --kubeconfig and --request-timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := explainCmd(t, "", tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if tc.stderr == "" {
				if errOut != "" {
					t.Errorf("stderr %q, want nothing", errOut)
				}
				return
			}
			if !strings.Contains(errOut, tc.stderr) || strings.Count(strings.TrimRight(errOut, "\n"), "\n") > 0 {
				t.Errorf("stderr %q, want one line holding %q", errOut, tc.stderr)
			}
		})
	}
}

// aliasBomb is a PodList of n pods annotated with one size-byte string
// through a YAML anchor: some n*size bytes decoded from some size.
func aliasBomb(n, size int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: PodList\nitems:\n")
	fmt.Fprintf(&b, "- metadata: {name: p0, annotations: {a: &big %s}}\n", strings.Repeat("x", size))
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "- metadata: {name: p%d, annotations: {a: *big}}\n", i)
	}
	return b.String()
}

// No status the command documents is 1 or 2: a Go program exits 2 on a
// panic or a fatal runtime error (out of memory), 1 on log.Fatal, and go
// run 1 for any failure. --help lists them, and the request timeout's
// default.
func TestExitStatuses(t *testing.T) {
	statuses := map[int]string{}
	for name, code := range map[string]int{
		"fits":     explain.Fits.ExitCode(),
		"admitted": explain.AdmittedAfterPreemption.ExitCode(),
		"rejected": explain.Rejected.ExitCode(),
		"input":    exitBadInput,
		"cluster":  exitCluster,
	} {
		if other, ok := statuses[code]; ok || code == 1 || code == 2 || code >= 128 {
			t.Errorf("%s exits %d (also %q): want a status of its own, neither 1 nor 2 nor a signal's", name, code, other)
		}
		statuses[code] = name
	}
	code, out, errOut := explainCmd(t, "", "--help")
	for _, want := range []string{
		"(exit status: 0 fits, 3 bad input, 4 no answer from the API server, 5 admitted after preemption, 6 rejected, 128+n ended by signal n)",
		"--request-timeout duration",
		"(exit status 4) (default 30s)",
	} {
		if code != 0 || errOut != "" || !strings.Contains(out, want) {
			t.Errorf("--help: exit %d, stderr %q, output lacks %q:\n%s", code, errOut, want, out)
		}
	}
}
