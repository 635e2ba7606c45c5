package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
)

const (
	testServer = "https://127.0.0.1:16443"
	testNode   = "node-a"
	day        = 24 * time.Hour
	year       = 365 * day
)

var t0 = time.Date(2030, time.March, 1, 12, 0, 0, 0, time.UTC)

func ensure(t *testing.T, dir, server, node string, now time.Time) *Set {
	t.Helper()
	s, err := Ensure(dir, server, node, now)
	if err != nil {
		t.Fatalf("Ensure(%q, %q, %v): %v", server, node, now, err)
	}
	return s
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCert(data)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	return c
}

func caPool(t *testing.T, s *Set) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	p.AddCert(readCert(t, s.CAFile))
	return p
}

func TestCertificates(t *testing.T) {
	s := ensure(t, t.TempDir(), testServer, testNode, t0)
	roots := caPool(t, s)

	ca := readCert(t, s.CAFile)
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 || ca.CheckSignatureFrom(ca) != nil {
		t.Errorf("CA is not a self-signed signing CA: IsCA=%v KeyUsage=%v", ca.IsCA, ca.KeyUsage)
	}
	if got := ca.NotAfter.Sub(t0); got != 10*year {
		t.Errorf("CA lifetime after now = %v, want %v", got, 10*year)
	}

	tests := []struct {
		name      string
		cert, key string
		cn        string
		orgs      []string
		usage     x509.ExtKeyUsage
		wrong     x509.ExtKeyUsage
	}{
		{"serving", s.ServingCertFile, s.ServingKeyFile, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		{"apiserver-kubelet-client", s.APIServerKubeletClientCertFile, s.APIServerKubeletClientKeyFile, "kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		{"admin", s.adminCertFile, s.adminKeyFile, "critlet-admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		{"kubelet", s.nodeCertFile, s.nodeKeyFile, "system:node:node-a", []string{"system:nodes"}, x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := readCert(t, tt.cert)
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Errorf("verify for %v: %v", tt.usage, err)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{tt.wrong}}); err == nil {
				t.Errorf("verify for %v succeeded, want failure", tt.wrong)
			}
			if c.Subject.CommonName != tt.cn || !slices.Equal(c.Subject.Organization, tt.orgs) {
				t.Errorf("subject = CN %q O %q, want CN %q O %q", c.Subject.CommonName, c.Subject.Organization, tt.cn, tt.orgs)
			}
			// kubeadm's leaves: digital signature and key encipherment.
			if c.IsCA || c.KeyUsage&x509.KeyUsageDigitalSignature == 0 || c.KeyUsage&x509.KeyUsageCertSign != 0 {
				t.Errorf("IsCA=%v KeyUsage=%v, want a leaf that signs and signs no certificates", c.IsCA, c.KeyUsage)
			}
			if got := c.NotAfter.Sub(t0); got != year {
				t.Errorf("lifetime after now = %v, want %v", got, year)
			}
			if !c.NotBefore.Before(t0) {
				t.Errorf("NotBefore %v is not before now %v", c.NotBefore, t0)
			}
			// kubeadm draws serials uniformly from [1, 2^63): below 2^32
			// once in four billion.
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() < 32 {
				t.Errorf("serial %v is not a large positive random number", c.SerialNumber)
			}
			if _, err := tls.LoadX509KeyPair(tt.cert, tt.key); err != nil {
				t.Errorf("key does not load with its certificate: %v", err)
			}
		})
	}
}

func TestSerialsDiffer(t *testing.T) {
	a := ensure(t, t.TempDir(), testServer, testNode, t0)
	b := ensure(t, t.TempDir(), testServer, testNode, t0)
	if readCert(t, a.CAFile).SerialNumber.Cmp(readCert(t, b.CAFile).SerialNumber) == 0 {
		t.Error("two CAs share a serial number")
	}
	if readCert(t, a.ServingCertFile).SerialNumber.Cmp(readCert(t, a.adminCertFile).SerialNumber) == 0 {
		t.Error("two leaves share a serial number")
	}
}

func TestServingNames(t *testing.T) {
	base := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	tests := []struct {
		server string
		dns    []string
		ips    []string
	}{
		{"https://127.0.0.1:16443", base, []string{"127.0.0.1", "10.0.0.1"}},
		{"https://localhost:16443", base, []string{"127.0.0.1", "10.0.0.1"}},
		{"https://[::1]:16443", base, []string{"127.0.0.1", "10.0.0.1", "::1"}},
		{"https://Critlet.Example:6443", append(slices.Clone(base), "critlet.example"), []string{"127.0.0.1", "10.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.server, func(t *testing.T) {
			s := ensure(t, t.TempDir(), tt.server, testNode, t0)
			c := readCert(t, s.ServingCertFile)
			if !sameSet(c.DNSNames, tt.dns) {
				t.Errorf("DNS names = %q, want %q", c.DNSNames, tt.dns)
			}
			if got := ipStrings(c.IPAddresses); !sameSet(got, tt.ips) {
				t.Errorf("IPs = %q, want %q", got, tt.ips)
			}
			for _, h := range append(slices.Clone(tt.dns), tt.ips...) {
				_, err := c.Verify(x509.VerifyOptions{Roots: caPool(t, s), CurrentTime: t0, DNSName: h})
				if err != nil {
					t.Errorf("verify for host %s: %v", h, err)
				}
			}
		})
	}
}

func TestKubeconfigs(t *testing.T) {
	s := ensure(t, t.TempDir(), testServer, testNode, t0)
	tests := []struct {
		name, path, user, cert, key string
	}{
		{"admin", s.AdminKubeconfig, "critlet-admin", s.adminCertFile, s.adminKeyFile},
		{"kubelet", s.KubeletKubeconfig, "system:node:node-a", s.nodeCertFile, s.nodeKeyFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := clientcmd.LoadFromFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil {
				t.Fatalf("current context %q missing", cfg.CurrentContext)
			}
			cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if cluster == nil || user == nil {
				t.Fatalf("context %+v refers to missing cluster or user", ctx)
			}
			if cluster.Server != testServer || cluster.CertificateAuthority != s.CAFile {
				t.Errorf("cluster = server %q CA %q, want %q %q", cluster.Server, cluster.CertificateAuthority, testServer, s.CAFile)
			}
			if ctx.AuthInfo != tt.user || user.ClientCertificate != tt.cert || user.ClientKey != tt.key {
				t.Errorf("user %q cert %q key %q, want %q %q %q", ctx.AuthInfo, user.ClientCertificate, user.ClientKey, tt.user, tt.cert, tt.key)
			}
			if got := readCert(t, user.ClientCertificate).Subject.CommonName; got != tt.user {
				t.Errorf("client certificate CN = %q, want %q", got, tt.user)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != testServer || rc.TLSClientConfig.CAFile != s.CAFile || rc.TLSClientConfig.CertFile != tt.cert || rc.TLSClientConfig.KeyFile != tt.key {
				t.Errorf("rest config = %s %+v", rc.Host, rc.TLSClientConfig)
			}
		})
	}
}

// TestHandshake checks that the pieces fit together as kube-apiserver uses
// them: its serving certificate, the CA as --client-ca-file, and clients
// built from the kubeconfigs.
func TestHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no loopback listener: %v", err)
	}
	server := "https://" + ln.Addr().String()
	s := ensure(t, t.TempDir(), server, testNode, time.Now())

	serving, err := tls.LoadX509KeyPair(s.ServingCertFile, s.ServingKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.TLS.PeerCertificates[0]
		fmt.Fprintf(w, "%s %s", c.Subject.CommonName, strings.Join(c.Subject.Organization, ","))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    caPool(t, s),
	}
	srv.StartTLS()
	defer srv.Close()

	for path, want := range map[string]string{
		s.AdminKubeconfig:   "critlet-admin system:masters",
		s.KubeletKubeconfig: "system:node:node-a system:nodes",
	} {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(rc)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(server)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Errorf("%s: server saw %q, want %q", filepath.Base(path), body, want)
		}
	}
}

type fileState struct {
	info fs.FileInfo
	data []byte
}

func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]fileState{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = fileState{info, data}
	}
	return m
}

// changed lists the files that were created, replaced or removed between
// two snapshots. A rename gives a file a new identity even when its bytes
// and mtime happen to match.
func changed(before, after map[string]fileState) []string {
	var out []string
	for name, a := range after {
		b, ok := before[name]
		if !ok || !os.SameFile(a.info, b.info) || !a.info.ModTime().Equal(b.info.ModTime()) || string(a.data) != string(b.data) {
			out = append(out, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

var (
	allFiles = []string{
		"admin.crt", "admin.key", "admin.kubeconfig",
		"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver.crt", "apiserver.key",
		"ca.crt", "ca.key",
		"kubelet-client.crt", "kubelet-client.key", "kubelet.kubeconfig",
		"sa.key", "sa.pub",
	}
	leafFiles = []string{
		"admin.crt", "admin.key",
		"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver.crt", "apiserver.key",
		"kubelet-client.crt", "kubelet-client.key",
	}
	caAndLeafFiles = append([]string{"ca.crt", "ca.key"}, leafFiles...)
)

func TestIdempotent(t *testing.T) {
	dir := t.TempDir()
	first := ensure(t, dir, testServer, testNode, t0)
	if got := names(first.Written); !slices.Equal(got, allFiles) {
		t.Errorf("first Ensure wrote %q, want %q", got, allFiles)
	}
	before := snapshot(t, dir)
	if got := slices.Sorted(maps.Keys(before)); !slices.Equal(got, allFiles) {
		t.Errorf("directory holds %q, want %q (temporary files left behind?)", got, allFiles)
	}
	time.Sleep(10 * time.Millisecond) // lets a rewrite show in the mtime
	second := ensure(t, dir, testServer, testNode, t0.Add(30*day))
	if len(second.Written) != 0 {
		t.Errorf("second Ensure wrote %q", second.Written)
	}
	if c := changed(before, snapshot(t, dir)); len(c) != 0 {
		t.Errorf("second Ensure changed %q", c)
	}
	if !reflect.DeepEqual(clearWritten(first), clearWritten(second)) {
		t.Errorf("paths differ:\n%+v\n%+v", first, second)
	}
}

func clearWritten(s *Set) *Set {
	c := *s
	c.Written = nil
	return &c
}

func names(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	slices.Sort(out)
	return out
}

func corrupt(name string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("garbage\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(name string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// copyFrom puts files from a directory set up independently, so with
// another CA, in place of dir's own.
func copyFrom(files ...string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		other := t.TempDir()
		ensure(t, other, testServer, testNode, t0)
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(other, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func swap(a, b string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		pa, pb, tmp := filepath.Join(dir, a), filepath.Join(dir, b), filepath.Join(dir, "swap")
		for _, r := range [][2]string{{pa, tmp}, {pb, pa}, {tmp, pb}} {
			if err := os.Rename(r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// resign replaces a leaf with one signed by the right CA but differing
// from what Ensure wants in the way edit describes.
func resign(name string, edit func(*leafSpec)) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		s := newSet(dir)
		ca, err := s.loadPair(s.CAFile, s.CAKeyFile)
		if err != nil || ca == nil {
			t.Fatalf("loading CA: %v", err)
		}
		for _, spec := range s.leaves(testNode, "127.0.0.1") {
			if filepath.Base(spec.certFile) != name {
				continue
			}
			edit(&spec)
			p, err := newLeaf(ca, spec, t0)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.writePair(spec.certFile, spec.keyFile, p); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("no leaf %s", name)
	}
}

// intermediateCA replaces the CA with a CA certificate that is not self-signed.
func intermediateCA(t *testing.T, dir string) {
	root, err := newCA(t0)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := newCA(t0)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *sub.cert
	tmpl.MaxPathLenZero = true
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, root.cert, sub.key.Public(), root.key)
	if err != nil {
		t.Fatal(err)
	}
	if sub.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	s := newSet(dir)
	if err := s.writePair(s.CAFile, s.CAKeyFile, sub); err != nil {
		t.Fatal(err)
	}
}

func TestRegenerate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*testing.T, string)
		server string
		node   string
		now    time.Time
		want   []string
	}{
		{name: "nothing", want: nil},
		{name: "corrupt ca.crt", mutate: corrupt("ca.crt"), want: caAndLeafFiles},
		{name: "corrupt ca.key", mutate: corrupt("ca.key"), want: caAndLeafFiles},
		{name: "missing ca.crt", mutate: remove("ca.crt"), want: caAndLeafFiles},
		{name: "CA not self-signed", mutate: intermediateCA, want: caAndLeafFiles},
		{name: "leaf as CA", mutate: swap("ca.crt", "admin.crt"), want: caAndLeafFiles},
		{name: "corrupt serving cert", mutate: corrupt("apiserver.crt"), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "missing serving key", mutate: remove("apiserver.key"), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "corrupt kubelet key", mutate: corrupt("kubelet-client.key"), want: []string{"kubelet-client.crt", "kubelet-client.key"}},
		{name: "keys swapped", mutate: swap("admin.key", "apiserver.key"), want: []string{"admin.crt", "admin.key", "apiserver.crt", "apiserver.key"}},
		{name: "foreign CA", mutate: copyFrom("ca.crt", "ca.key"), want: leafFiles},
		{name: "leaf from foreign CA", mutate: copyFrom("apiserver.crt", "apiserver.key"), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "serving cert lacks a SAN", mutate: resign("apiserver.crt", func(s *leafSpec) { s.dnsNames = s.dnsNames[1:] }), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "serving cert has an extra SAN", mutate: resign("apiserver.crt", func(s *leafSpec) { s.ips = append(s.ips, net.ParseIP("192.0.2.1")) }), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "serving cert for clients", mutate: resign("apiserver.crt", func(s *leafSpec) { s.usage = clientUsage }), want: []string{"apiserver.crt", "apiserver.key"}},
		{name: "admin in wrong group", mutate: resign("admin.crt", func(s *leafSpec) { s.orgs = []string{"system:nodes"} }), want: []string{"admin.crt", "admin.key"}},
		{name: "kubelet with wrong name", mutate: resign("kubelet-client.crt", func(s *leafSpec) { s.commonName = "system:node:other" }), want: []string{"kubelet-client.crt", "kubelet-client.key"}},
		{name: "leaves outside renewal window", now: t0.Add(year - 25*time.Hour), want: nil},
		{name: "leaves expiring within a day", now: t0.Add(year - 23*time.Hour), want: leafFiles},
		{name: "leaves expired", now: t0.Add(2 * year), want: leafFiles},
		{name: "CA expiring within a day", now: t0.Add(10*year - 23*time.Hour), want: caAndLeafFiles},
		{name: "clock went back", now: t0.Add(-2 * time.Hour), want: caAndLeafFiles},
		{name: "node renamed", node: "node-b", want: []string{"kubelet-client.crt", "kubelet-client.key", "kubelet.kubeconfig"}},
		{name: "server port changed", server: "https://127.0.0.1:6443", want: []string{"admin.kubeconfig", "kubelet.kubeconfig"}},
		{name: "server host changed", server: "https://[::1]:16443", want: []string{"admin.kubeconfig", "apiserver.crt", "apiserver.key", "kubelet.kubeconfig"}},
		{name: "corrupt admin kubeconfig", mutate: corrupt("admin.kubeconfig"), want: []string{"admin.kubeconfig"}},
		{name: "missing kubelet kubeconfig", mutate: remove("kubelet.kubeconfig"), want: []string{"kubelet.kubeconfig"}},
		{name: "kubeconfigs swapped", mutate: swap("admin.kubeconfig", "kubelet.kubeconfig"), want: []string{"admin.kubeconfig", "kubelet.kubeconfig"}},
		{name: "corrupt sa.key", mutate: corrupt("sa.key"), want: []string{"sa.key", "sa.pub"}},
		{name: "corrupt sa.pub", mutate: corrupt("sa.pub"), want: []string{"sa.pub"}},
		{name: "foreign sa.pub", mutate: copyFrom("sa.pub"), want: []string{"sa.pub"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, node, now := testServer, testNode, t0
			if tt.server != "" {
				server = tt.server
			}
			if tt.node != "" {
				node = tt.node
			}
			if !tt.now.IsZero() {
				now = tt.now
			}
			dir := t.TempDir()
			ensure(t, dir, testServer, testNode, t0)
			if tt.mutate != nil {
				tt.mutate(t, dir)
			}
			before := snapshot(t, dir)
			time.Sleep(10 * time.Millisecond)

			s := ensure(t, dir, server, node, now)
			after := snapshot(t, dir)
			want := slices.Sorted(slices.Values(tt.want))
			if got := changed(before, after); !slices.Equal(got, want) {
				t.Errorf("changed %q, want %q", got, want)
			}
			if got := names(s.Written); !slices.Equal(got, want) {
				t.Errorf("Written = %q, want %q", got, want)
			}
			checkValid(t, s, server, node, now)

			again := ensure(t, dir, server, node, now)
			if len(again.Written) != 0 {
				t.Errorf("Ensure after regeneration wrote %q", again.Written)
			}
		})
	}
}

// checkValid checks that everything in s is consistent and usable at now.
func checkValid(t *testing.T, s *Set, server, node string, now time.Time) {
	t.Helper()
	roots := caPool(t, s)
	for _, f := range [][2]string{
		{s.ServingCertFile, s.ServingKeyFile},
		{s.APIServerKubeletClientCertFile, s.APIServerKubeletClientKeyFile},
		{s.adminCertFile, s.adminKeyFile},
		{s.nodeCertFile, s.nodeKeyFile},
	} {
		usage := x509.ExtKeyUsageClientAuth
		if f[0] == s.ServingCertFile {
			usage = x509.ExtKeyUsageServerAuth
		}
		c := readCert(t, f[0])
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now.Add(renewBefore), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s: %v", filepath.Base(f[0]), err)
		}
		if _, err := tls.LoadX509KeyPair(f[0], f[1]); err != nil {
			t.Errorf("%s: %v", filepath.Base(f[1]), err)
		}
	}
	if got, want := readCert(t, s.nodeCertFile).Subject.CommonName, "system:node:"+node; got != want {
		t.Errorf("kubelet CN = %q, want %q", got, want)
	}
	for _, kc := range []string{s.AdminKubeconfig, s.KubeletKubeconfig} {
		rc, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		if rc.Host != server {
			t.Errorf("%s: server %q, want %q", filepath.Base(kc), rc.Host, server)
		}
	}
	keyPEM, err := os.ReadFile(s.ServiceAccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := keyutil.PublicKeysFromFile(s.ServiceAccountPublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 1 || !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pubs[0]) {
		t.Errorf("sa.pub does not hold the public half of sa.key")
	}
}

// TestLeafWithinCA checks that a leaf signed late in the CA's life does not
// claim to outlive it.
func TestLeafWithinCA(t *testing.T) {
	dir := t.TempDir()
	s := ensure(t, dir, testServer, testNode, t0)
	later := t0.Add(9*year + 300*day)
	s = ensure(t, dir, testServer, testNode, later)
	ca := readCert(t, s.CAFile)
	if got := readCert(t, s.ServingCertFile).NotAfter; !got.Equal(ca.NotAfter) {
		t.Errorf("serving cert expires %v, CA %v", got, ca.NotAfter)
	}
	if got := names(s.Written); !slices.Equal(got, leafFiles) {
		t.Errorf("wrote %q, want %q", got, leafFiles)
	}
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := ensure(t, dir, testServer, testNode, t0)

	mode := func(p string) fs.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if got := mode(dir); got != 0o700 {
		t.Errorf("directory mode %v, want 0700", got)
	}
	secret := []string{s.CAKeyFile, s.ServingKeyFile, s.APIServerKubeletClientKeyFile, s.adminKeyFile, s.nodeKeyFile, s.ServiceAccountKeyFile, s.AdminKubeconfig, s.KubeletKubeconfig}
	public := []string{s.CAFile, s.ServingCertFile, s.APIServerKubeletClientCertFile, s.adminCertFile, s.nodeCertFile, s.ServiceAccountPublicKeyFile}
	for _, p := range secret {
		if got := mode(p); got != 0o600 {
			t.Errorf("%s mode %v, want 0600", filepath.Base(p), got)
		}
	}
	for _, p := range public {
		if got := mode(p); got != 0o644 {
			t.Errorf("%s mode %v, want 0644", filepath.Base(p), got)
		}
	}

	// Loosened modes are tightened again without replacing the keys.
	for _, p := range append(slices.Clone(secret), dir) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, dir)
	s = ensure(t, dir, testServer, testNode, t0)
	if len(s.Written) != 0 {
		t.Errorf("wrote %q", s.Written)
	}
	for name, a := range snapshot(t, dir) {
		if b := before[name]; !os.SameFile(a.info, b.info) || string(a.data) != string(b.data) {
			t.Errorf("%s was replaced", name)
		}
	}
	for _, p := range append(secret, dir) {
		want := fs.FileMode(0o600)
		if p == dir {
			want = 0o700
		}
		if got := mode(p); got != want {
			t.Errorf("%s mode %v after Ensure, want %v", filepath.Base(p), got, want)
		}
	}
}

func TestRelativeDir(t *testing.T) {
	t.Chdir(t.TempDir())
	s := ensure(t, "pki", testServer, testNode, t0)
	for _, p := range []string{s.CAFile, s.AdminKubeconfig, s.ServiceAccountKeyFile} {
		if !filepath.IsAbs(p) {
			t.Errorf("%s is not absolute", p)
		}
	}
	cfg, err := clientcmd.LoadFromFile(s.KubeletKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.AuthInfos["system:node:node-a"].ClientCertificate; got != s.nodeCertFile || !filepath.IsAbs(got) {
		t.Errorf("kubeconfig certificate path %q, want absolute %q", got, s.nodeCertFile)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, server, node string
		setup              func(*testing.T, string)
		want               string
	}{
		{name: "empty node", server: testServer, node: "", want: "pki: invalid node name"},
		{name: "upper-case node", server: testServer, node: "Node-A", want: "pki: invalid node name"},
		{name: "http server", server: "http://127.0.0.1:8080", node: testNode, want: "pki: server URL"},
		{name: "no host", server: "https://:6443", node: testNode, want: "pki: server URL"},
		{name: "unparsable server", server: "https://[::1", node: testNode, want: "pki: parsing server URL"},
		{
			name: "unreadable CA", server: testServer, node: testNode,
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(filepath.Join(dir, "ca.crt"), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			want: "pki: reading ca.crt:",
		},
		{
			name: "directory is a file", server: testServer, node: testNode,
			setup: func(t *testing.T, dir string) {
				if err := os.Remove(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			want: "pki: creating directory:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			_, err := Ensure(dir, tt.server, tt.node, t0)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Ensure error = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestWriteKubeconfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.kubeconfig")
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "x.crt"), filepath.Join(dir, "x.key")
	if err := WriteKubeconfig(path, "https://127.0.0.1:1", ca, cert, key, "someone"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || ctx.AuthInfo != "someone" || cfg.Clusters[ctx.Cluster].Server != "https://127.0.0.1:1" || cfg.AuthInfos["someone"].ClientKey != key {
		t.Errorf("unexpected kubeconfig %+v", cfg)
	}
	if err := WriteKubeconfig(path, "https://127.0.0.1:1", "ca.crt", cert, key, "someone"); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("relative CA path: error %v", err)
	}
}

func TestKeyFormats(t *testing.T) {
	s := ensure(t, t.TempDir(), testServer, testNode, t0)
	for _, f := range []struct{ path, block string }{
		{s.CAKeyFile, "EC PRIVATE KEY"},
		{s.ServingKeyFile, "EC PRIVATE KEY"},
		{s.ServiceAccountKeyFile, "RSA PRIVATE KEY"},
		{s.ServiceAccountPublicKeyFile, "PUBLIC KEY"},
	} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := pem.Decode(data); b == nil || b.Type != f.block {
			t.Errorf("%s: want a %s PEM block", filepath.Base(f.path), f.block)
		}
	}
	// kube-apiserver loads these with keyutil.
	if _, err := keyutil.PrivateKeyFromFile(s.ServiceAccountKeyFile); err != nil {
		t.Error(err)
	}
}

// A key kept from an earlier run is never restricted through a link, and
// the directory is never a link: the caller is root, and chmod or the
// files written would land where the link points.
func TestLinksRefused(t *testing.T) {
	dir := t.TempDir()
	s := ensure(t, dir, testServer, testNode, t0)
	elsewhere := filepath.Join(t.TempDir(), "key")
	data, err := os.ReadFile(s.ServiceAccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(elsewhere, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.ServiceAccountKeyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, s.ServiceAccountKeyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir, testServer, testNode, t0); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Ensure with the key a link: %v, want a refusal", err)
	}
	if fi, err := os.Stat(elsewhere); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target: %v, %v; want it untouched, mode 0644", fi, err)
	}

	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "pki")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(link, testServer, testNode, t0); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("Ensure in a linked directory: %v, want a refusal", err)
	}
	if entries, _ := os.ReadDir(target); len(entries) > 0 {
		t.Errorf("Ensure wrote where the link points: %v", entries)
	}
}
