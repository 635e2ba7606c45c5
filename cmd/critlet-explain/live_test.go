package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/critlet/critlet/internal/explain"
)

// apiServer answers as an API server holding the fixtures' node and pods,
// but for the paths in fail, answered with that HTTP status, and block,
// held until the request is cancelled after arrived is closed; with
// midBody, held after the headers and half the body.
type apiServer struct {
	node, pods []byte
	fail       map[string]int
	block      string
	midBody    bool
	arrived    chan struct{}
	once       sync.Once
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	node, err := explain.DecodeNode([]byte(readFile(t, filepath.Join(testdata, "node.yaml"))))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := explain.DecodePods([]byte(readFile(t, filepath.Join(testdata, "pods.yaml"))))
	if err != nil {
		t.Fatal(err)
	}
	list := v1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	node.APIVersion, node.Kind = "v1", "Node"
	s := &apiServer{fail: map[string]int{}, arrived: make(chan struct{})}
	if s.node, err = json.Marshal(node); err != nil {
		t.Fatal(err)
	}
	if s.pods, err = json.Marshal(list); err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	nodePath  = "/api/v1/nodes/worker-1"
	podsPath  = "/api/v1/pods"
	classPath = "/apis/scheduling.k8s.io/v1/priorityclasses/gold"
)

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == s.block {
		if s.midBody {
			w.WriteHeader(http.StatusOK)
			w.Write(s.pods[:len(s.pods)/2])
			w.(http.Flusher).Flush()
		}
		s.once.Do(func() { close(s.arrived) })
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	}
	status, body := http.StatusOK, []byte(nil)
	switch r.URL.Path {
	case nodePath:
		body = s.node
	case podsPath:
		body = s.pods
	case classPath:
		body = []byte(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"gold"},"value":2000000500}`)
	default:
		status = http.StatusNotFound
	}
	if code, ok := s.fail[r.URL.Path]; ok {
		status = code
	}
	if status != http.StatusOK {
		body = fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Status","status":"Failure","code":%d,"reason":%q,"message":"said the server"}`,
			status, metav1.StatusReason(strings.ReplaceAll(http.StatusText(status), " ", "")))
	}
	w.WriteHeader(status)
	w.Write(body)
}

// Asked live, the exit status tells bad input (3) from a cluster that did
// not answer (4) and from an interrupt (128 + the signal), and from the
// verdicts (0, 5 and 6).
func TestLiveExitCodes(t *testing.T) {
	dir := t.TempDir()
	// An agent of priority class class.
	classAgent := func(class string) string {
		p := filepath.Join(dir, strings.ReplaceAll(class, "/", "-")+".yaml")
		if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: agent, namespace: kube-system}\nspec:\n  priorityClassName: "+class+"\n  containers: [{name: a, image: a, resources: {requests: {cpu: 1500m}}}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goldAgent := classAgent("gold")
	agent := filepath.Join(testdata, "agent.yaml")
	// client-go logs some failures (a body it could not read) through
	// klog: they must not reach standard error beside the one line.
	var klogged bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&klogged)
	defer klog.LogToStderr(true)
	for name, tc := range map[string]struct {
		fail   map[string]int
		block  string
		signal syscall.Signal
		node   string
		pod    string
		// limit, if set, sets maxInput from the responses' sizes.
		limit  func(s *apiServer) int
		code   int
		stderr string
	}{
		"answered":                {code: 5},
		"answered with a class":   {pod: goldAgent, code: 5},
		"node forbidden":          {fail: map[string]int{nodePath: 403}, code: 4, stderr: "reading node worker-1: said the server"},
		"node unknown":            {node: "worker-9", code: 3, stderr: `no node named "worker-9"`},
		"pods forbidden":          {fail: map[string]int{podsPath: 403}, code: 4, stderr: "listing the pods of node worker-1: said the server"},
		"pods fail":               {fail: map[string]int{podsPath: 500}, code: 4, stderr: "said the server"},
		"class unknown":           {fail: map[string]int{classPath: 404}, pod: goldAgent, code: 3, stderr: `no PriorityClass named "gold"`},
		"class name malformed":    {pod: classAgent("gold/1"), code: 3, stderr: `"gold/1" is not a priority class name`},
		"class forbidden":         {fail: map[string]int{classPath: 403}, pod: goldAgent, code: 4, stderr: "reading priority class gold: said the server"},
		"responses at the limit":  {limit: func(s *apiServer) int { return max(len(s.node), len(s.pods)) }, code: 5},
		"response past the limit": {limit: func(s *apiServer) int { return len(s.node) - 1 }, code: 4, stderr: "reading node worker-1: unexpected error when reading response body. Please retry. Original error: the API server's response is larger than the input limit of"},
		"interrupted":             {block: podsPath, signal: syscall.SIGINT, code: 130, stderr: "critlet-explain: interrupted (interrupt)\n"},
		"terminated":              {block: nodePath, signal: syscall.SIGTERM, code: 143, stderr: "critlet-explain: interrupted (terminated)\n"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newAPIServer(t)
			s.fail, s.block = tc.fail, tc.block
			srv := httptest.NewServer(s)
			defer srv.Close()
			if tc.limit != nil {
				defer func(m int64) { maxInput = m }(maxInput)
				maxInput = int64(tc.limit(s))
			}
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kc, []byte(kubeconfig(srv.URL)), 0o600); err != nil {
				t.Fatal(err)
			}
			node, pod := cmp.Or(tc.node, "worker-1"), cmp.Or(tc.pod, agent)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tc.block != "" {
				go func() {
					<-s.arrived
					cancel(interrupted{tc.signal})
				}()
			}
			var out, errOut strings.Builder
			code := run(ctx, []string{"--kubeconfig", kc, "--node", node, "--pod", pod, "--policy", "upstream"}, strings.NewReader(""), &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.stderr) || strings.Count(strings.TrimSuffix(errOut.String(), "\n"), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want %d and one line holding %q", code, errOut.String(), tc.code, tc.stderr)
			}
			klog.Flush()
			if klogged.Len() > 0 {
				t.Errorf("client-go logged %q", klogged.String())
				klogged.Reset()
			}
			if failed := tc.code == exitBadInput || tc.code == exitCluster || tc.code >= 128; failed && out.Len() > 0 {
				t.Errorf("output %q after a failure", out.String())
			}
		})
	}
}

// A stalled API server is one that did not answer (exit 4) once
// --request-timeout passes, whichever request it stalls: before the
// headers, in the midst of the body, or the class's, the third request.
func TestStalledAPIServer(t *testing.T) {
	goldAgent := filepath.Join(t.TempDir(), "gold.yaml")
	if err := os.WriteFile(goldAgent, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: agent, namespace: kube-system}\nspec:\n  priorityClassName: gold\n  containers: [{name: a, image: a}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// silent accepts connections and never reads or writes them.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for name, tc := range map[string]struct {
		silent  bool
		block   string
		midBody bool
		pod     string
		stderr  string
	}{
		"accepting, never answering": {silent: true, stderr: "reading node worker-1: no answer within 1s"},
		"node, before the headers":   {block: nodePath, stderr: "reading node worker-1: no answer within 1s"},
		"pods, midway through":       {block: podsPath, midBody: true, stderr: "listing the pods of node worker-1: no answer within 1s"},
		"priority class":             {block: classPath, pod: goldAgent, stderr: "reading priority class gold: no answer within 1s"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newAPIServer(t)
			s.block, s.midBody = tc.block, tc.midBody
			srv := httptest.NewServer(s)
			defer srv.Close()
			server := srv.URL
			if tc.silent {
				server = "http://" + silent.Addr().String()
			}
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kc, []byte(kubeconfig(server)), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--kubeconfig", kc, "--node", "worker-1", "--pod", cmp.Or(tc.pod, filepath.Join(testdata, "agent.yaml")), "--request-timeout", "1s"}
			start := time.Now()
			code, out, errOut := explainCmd(t, "", args...)
			// Generous: 1s per request, of at most three, on a busy machine.
			if took := time.Since(start); code != 4 || !strings.Contains(errOut, tc.stderr) || out != "" || took > 30*time.Second {
				t.Fatalf("exit %d after %v, stdout %q, stderr %q; want 4 well within 30s and one line holding %q", code, took, out, errOut, tc.stderr)
			}
		})
	}
}
