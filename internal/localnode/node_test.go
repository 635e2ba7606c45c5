package localnode

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletconfigscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	kubeletconfigcodec "k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"

	"github.com/critlet/critlet/internal/localnode/pki"
	"github.com/critlet/critlet/internal/localnode/process"
	"github.com/critlet/critlet/test/testenv"
)

// The package's tests lock a file of their own, not the host's, and claim,
// or read the claim on, none of the host's node resources.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "critlet-localnode-test-")
	if err != nil {
		panic(err)
	}
	hostFiles.LockFile = filepath.Join(dir, "lock")
	hostFiles.OwnerFile = filepath.Join(dir, "owner")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testNode(t *testing.T) *Node {
	t.Helper()
	cfg, err := Config{StateDir: t.TempDir(), BinDir: "/bin", Kubelet: "/bin/true", MaxPods: 4, RuntimeRequestTimeout: 30 * time.Second,
		RuntimeHandlers: map[string]string{"slow": "/opt/slow-runc", "fast": "/opt/fast-runc"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: cfg, l: layout{cfg.StateDir}}
	n.pki, err = pki.Ensure(n.l.pki(), "https://127.0.0.1:16443", cfg.NodeName, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The generated KubeletConfiguration must pass the kubelet's own decoding
// (strict: unknown fields fail) and validation, with what the node needs.
func TestKubeletConfigIsValid(t *testing.T) {
	n := testNode(t)
	b, err := n.kubeletConfig()
	if err != nil {
		t.Fatal(err)
	}
	_, codecs, err := kubeletconfigscheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeletconfigcodec.DecodeKubeletConfiguration(context.Background(), codecs, b)
	if err != nil {
		t.Fatalf("the kubelet cannot decode the configuration: %v\n%s", err, b)
	}
	if err := kubeletconfigvalidation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		t.Fatalf("the kubelet rejects the configuration: %v\n%s", err, b)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"port", kc.Port, int32(DefaultPorts.Kubelet)},
		{"healthzPort", kc.HealthzPort, int32(DefaultPorts.KubeletHealthz)},
		{"readOnlyPort", kc.ReadOnlyPort, int32(0)},
		{"cgroupRoot", kc.CgroupRoot, CgroupRoot},
		{"cgroupDriver", kc.CgroupDriver, "cgroupfs"},
		{"failCgroupV1", kc.FailCgroupV1, false},
		{"maxPods", kc.MaxPods, int32(4)},
		{"runtimeRequestTimeout", kc.RuntimeRequestTimeout.Duration, 30 * time.Second},
		{"staticPodPath", kc.StaticPodPath, n.cfg.ManifestDir()},
		{"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, "unix://" + n.l.criSocket()},
		{"anonymous auth", kc.Authentication.Anonymous.Enabled, false},
		{"client CA", kc.Authentication.X509.ClientCAFile, n.pki.CAFile},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// Nothing the kubelet writes may default to a shared host path.
	for _, p := range []string{kc.PodLogsDir, kc.VolumePluginDir, kc.StaticPodPath} {
		if !strings.HasPrefix(p, n.cfg.StateDir+"/") {
			t.Errorf("path %q is outside the state directory", p)
		}
	}
}

// containerd must accept its generated configuration, runtime handlers
// included. Skipped where containerd is not installed, except under make
// test, which installs it first.
func TestContainerdConfigLoads(t *testing.T) {
	_, err := exec.LookPath("containerd")
	testenv.Need(t, "containerd (hack/install-node-deps.sh)", err)
	n := testNode(t)
	conf := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(conf, []byte(n.renderContainerdConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("containerd", "--config", conf, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd rejects the configuration: %v\n%s", err, out)
	}
	dump := string(out)
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		`sandbox_image = "` + PauseImage + `"`,
		`address = "` + n.l.criSocket() + `"`,
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.fast]`,
		`BinaryName = "/opt/slow-runc"`,
		`conf_dir = "` + n.l.cniConfDir() + `"`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("containerd's view of the configuration lacks %q", want)
		}
	}
}

func TestPortsInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	p := Ports{EtcdClient: free(), EtcdPeer: free(), APIServer: busy, Kubelet: free(), KubeletHealthz: free()}
	err = p.checkFree()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), "in use") {
		t.Errorf("err = %v, want the apiserver's port reported in use", err)
	}
	ln.Close()
	if err := p.checkFree(); err != nil {
		t.Errorf("all ports free: %v", err)
	}
}

// A component that dies while Up waits for it is reported with its exit
// and the end of its log.
func TestWaitForReportsDeath(t *testing.T) {
	dir := t.TempDir()
	h, err := process.Start(process.Spec{Name: "crasher", Path: "/bin/sh", Args: []string{"-c", "echo 'fatal: bad flag'; exit 3"},
		LogFile: filepath.Join(dir, "log"), PIDFile: filepath.Join(dir, "pid")})
	if err != nil {
		t.Fatal(err)
	}
	err = waitFor(context.Background(), h, time.Minute, "ready", func(context.Context) error { return os.ErrNotExist })
	if err == nil || !strings.Contains(err.Error(), "crasher exited (exit status 3) before it was ready") || !strings.Contains(err.Error(), "fatal: bad flag") {
		t.Errorf("err = %v, want the exit status and the log's last lines", err)
	}
}

func TestWaitForTimesOut(t *testing.T) {
	dir := t.TempDir()
	h, err := process.Start(process.Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"30"}, LogFile: filepath.Join(dir, "log"), PIDFile: filepath.Join(dir, "pid")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Ref.Stop(time.Second) })
	err = waitFor(context.Background(), h, 300*time.Millisecond, "healthy", func(context.Context) error { return os.ErrDeadlineExceeded })
	if err == nil || !strings.Contains(err.Error(), "sleeper was not healthy within 300ms") {
		t.Errorf("err = %v, want a timeout naming the component", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	if _, err := (Config{StateDir: "relative"}).withDefaults(); err == nil {
		t.Error("a relative state directory was accepted")
	}
	c, err := Config{StateDir: "/x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "critlet-node" || c.Ports != DefaultPorts || c.RuntimeRequestTimeout != 2*time.Minute {
		t.Errorf("defaults = %+v", c)
	}
	for _, p := range []int{c.Ports.Kubelet, c.Ports.KubeletHealthz} {
		if p == 10250 || p == 10248 {
			t.Errorf("port %d collides with a stock kubelet on the same host", p)
		}
	}
}

// Down removes nothing from a directory no node has claimed, such as a
// mistyped state directory, and says so.
func TestDownLeavesUnclaimedDirectories(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"run", "etcd", "kubelet", "precious"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := Down(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "no local node created it") {
		t.Fatalf("Down of an unclaimed directory: %v", err)
	}
	for _, name := range []string{"run", "etcd", "kubelet", "precious"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Down of an unclaimed directory removed %s", name)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"/plain/path", "/with space/x", `/it's`, `/$(touch /tmp/x)`, "/back`tick`", ""} {
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("shell saw %q for %q", out, s)
		}
	}
}

// Private directories must be paths the node may cover, and apart.
func TestCheckPrivateDirs(t *testing.T) {
	for _, c := range []struct {
		dirs []string
		want string // error text; empty: accepted
	}{
		{[]string{"/etc/kubernetes", "/var/lib/etcd"}, ""},
		{[]string{"/etc"}, "no system directory"},
		{[]string{"etc/kubernetes"}, "no system directory"},
		{[]string{"/etc/kubernetes/"}, "no system directory"},
		{[]string{"/etc/kubernetes", "/etc/kubernetes"}, "overlap"},
		{[]string{"/etc/kubernetes", "/etc/kubernetes/pki"}, "overlap"},
		{[]string{"/srv/a-b", "/srv/a/b"}, "share"},
	} {
		err := checkPrivateDirs(c.dirs)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkPrivateDirs(%q) = %v, want %q", c.dirs, err, c.want)
		}
	}
}
