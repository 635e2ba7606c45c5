//go:build e2enode

package e2enode

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/critlet/critlet/internal/localnode"
)

// scrape returns the kubelet's /metrics samples whose name starts with
// prefix, keyed by the sample's full name with labels.
func (e *env) scrape(prefix string) map[string]float64 {
	e.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", suite.AdminKubeconfig())
	if err != nil {
		e.t.Fatalf("loading the admin kubeconfig: %v", err)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		e.t.Fatalf("TLS config: %v", err)
	}
	// The kubelet serves a self-signed certificate; only the client side is
	// being authenticated here.
	tlsCfg.InsecureSkipVerify = true
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", suite.Config().Ports.Kubelet)
	resp, err := hc.Get(url)
	if err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			e.t.Fatalf("malformed metric line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// checkMetrics checks the kubelet's preemption metrics after an admission
// that preempted victims pods: upstream's kubelet_preemptions counts each
// killed victim; critlet adds its own series for the admission.
func (e *env) checkMetrics(victims int) {
	e.t.Helper()
	var preemptions float64
	for k, v := range e.scrape("kubelet_preemptions") {
		if strings.HasPrefix(k, "kubelet_preemptions{") {
			preemptions += v
		}
	}
	if int(preemptions) != victims {
		e.t.Errorf("kubelet_preemptions sums to %v, want %d", preemptions, victims)
	}
	ours := e.scrape("kubelet_critical_preemption_")
	if e.kubelet.stock() {
		if len(ours) != 0 {
			e.t.Errorf("stock kubelet exports critlet's metrics: %v", ours)
		}
		return
	}
	want := map[string]float64{
		`kubelet_critical_preemption_victims_count{policy="upstream"}`:          1,
		`kubelet_critical_preemption_victims_sum{policy="upstream"}`:            float64(victims),
		`kubelet_critical_preemption_duration_seconds_count{policy="upstream"}`: 1,
	}
	for k, v := range want {
		if got, ok := ours[k]; !ok || got != v {
			e.t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	e.note("metrics: kubelet_preemptions=%v, critlet admissions=%v", preemptions, ours[`kubelet_critical_preemption_duration_seconds_count{policy="upstream"}`])
}

// expectSettingsLogged checks that the settings line of the kubelet now
// running holds each of want (key="value" or key=value).
func (e *env) expectSettingsLogged(want ...string) {
	e.t.Helper()
	last, _, _ := strings.Cut(e.currentKubeletLog(), "\n")
	for _, w := range want {
		if !strings.Contains(last, w) {
			e.t.Errorf("kubelet's settings line %q lacks %s", last, w)
		}
	}
}

// expectLogged checks that the kubelet now running has logged want.
func (e *env) expectLogged(want string) {
	e.t.Helper()
	if !strings.Contains(e.currentKubeletLog(), want) {
		e.t.Errorf("the kubelet did not log %q", want)
	}
}

// currentKubeletLog returns the kubelet log from the running critlet's
// settings line on: every kubelet of the suite writes to the same log.
func (e *env) currentKubeletLog() string {
	e.t.Helper()
	data, err := os.ReadFile(suite.Config().LogFile(localnode.Kubelet))
	if err != nil {
		e.t.Fatalf("reading the kubelet log: %v", err)
	}
	log := string(data)
	if k := strings.LastIndex(log, "critlet critical-pod admission handler installed"); k >= 0 {
		// From the start of that line.
		log = log[strings.LastIndex(log[:k], "\n")+1:]
	}
	return log
}
