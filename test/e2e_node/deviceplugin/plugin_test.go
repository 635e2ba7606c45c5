package deviceplugin

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	testResource = "critlet.example/widget"
	// waitTimeout is generous compared to the 500ms poll interval so that a
	// loaded CI machine does not cause flakes.
	waitTimeout = 10 * time.Second
)

// fakeKubelet serves the kubelet's Registration service. Like the real
// kubelet it calls the plugin back before acknowledging a registration, so a
// plugin that registers before it serves fails here too.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer

	dir  string
	srv  *grpc.Server
	done chan struct{}
	reqs chan *pluginapi.RegisterRequest
}

func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	path := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listening on fake kubelet socket: %v", err)
	}
	k := &fakeKubelet{
		dir:  dir,
		srv:  grpc.NewServer(),
		done: make(chan struct{}),
		reqs: make(chan *pluginapi.RegisterRequest, 16),
	}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() {
		defer close(k.done)
		_ = k.srv.Serve(ln)
	}()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	<-k.done
}

func (k *fakeKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn, err := dialUnix(filepath.Join(k.dir, req.GetEndpoint()))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "creating client for plugin: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "calling plugin back: %v", err)
	}
	k.reqs <- req
	return &pluginapi.Empty{}, nil
}

// nextRegistration waits for the next successful Register call.
func (k *fakeKubelet) nextRegistration(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case req := <-k.reqs:
		return req
	case <-time.After(waitTimeout):
		t.Fatalf("no registration within %v", waitTimeout)
		return nil
	}
}

// shortTempDir returns a directory whose socket paths fit the unix socket
// limit even when TMPDIR or the test name is long.
func shortTempDir(t *testing.T) string {
	t.Helper()
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "dp")
	if err != nil {
		t.Fatalf("creating temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func socketExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode()&fs.ModeSocket != 0
}

func startPlugin(t *testing.T, ctx context.Context, cfg Config) *Plugin {
	t.Helper()
	p, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

func pluginClient(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := dialUnix(socket)
	if err != nil {
		t.Fatalf("creating client for %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// firstDeviceList opens ListAndWatch and returns the stream and its first
// message.
func firstDeviceList(t *testing.T, ctx context.Context, c pluginapi.DevicePluginClient) (grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], *pluginapi.ListAndWatchResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("ListAndWatch: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("receiving device list: %v", err)
	}
	return stream, resp
}

func checkHealthyDevices(t *testing.T, resp *pluginapi.ListAndWatchResponse, want []string) {
	t.Helper()
	var got []string
	for _, d := range resp.GetDevices() {
		if d.GetHealth() != pluginapi.Healthy {
			t.Errorf("device %s health = %q, want %q", d.GetID(), d.GetHealth(), pluginapi.Healthy)
		}
		got = append(got, d.GetID())
	}
	if !slices.Equal(got, want) {
		t.Errorf("advertised devices = %v, want %v", got, want)
	}
}

func TestPluginServesAndRegisters(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	kubelet := startFakeKubelet(t, dir)

	p := startPlugin(t, ctx, Config{Dir: dir, ResourceName: testResource, Devices: 3})

	req := kubelet.nextRegistration(t)
	if req.GetVersion() != pluginapi.Version {
		t.Errorf("Register version = %q, want %q", req.GetVersion(), pluginapi.Version)
	}
	if req.GetResourceName() != testResource {
		t.Errorf("Register resource = %q, want %q", req.GetResourceName(), testResource)
	}
	if ep := req.GetEndpoint(); ep == "" || ep != filepath.Base(ep) {
		t.Fatalf("Register endpoint = %q, want a bare file name", ep)
	}
	if opts := req.GetOptions(); opts.GetPreStartRequired() || opts.GetGetPreferredAllocationAvailable() {
		t.Errorf("Register options = %v, want PreStart and preferred allocation off", opts)
	}
	socket := filepath.Join(dir, req.GetEndpoint())
	if !socketExists(socket) {
		t.Fatalf("registered endpoint %s is not a socket", socket)
	}

	c := pluginClient(t, socket)
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("GetDevicePluginOptions: %v", err)
	}
	if opts.GetPreStartRequired() || opts.GetGetPreferredAllocationAvailable() {
		t.Errorf("GetDevicePluginOptions = %v, want PreStart and preferred allocation off", opts)
	}

	wantIDs := []string{"widget-0", "widget-1", "widget-2"}
	if got := p.DeviceIDs(); !slices.Equal(got, wantIDs) {
		t.Errorf("DeviceIDs() = %v, want %v", got, wantIDs)
	}
	stream, list := firstDeviceList(t, ctx, c)
	checkHealthyDevices(t, list, wantIDs)
	// The stream must stay open after the initial list; watch it while the
	// other calls run.
	streamEnded := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		streamEnded <- err
	}()

	if got := p.Allocated(); len(got) != 0 {
		t.Errorf("Allocated() before any Allocate = %v, want none", got)
	}
	alloc, err := c.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{
			{DevicesIds: []string{"widget-0", "widget-2"}},
			{DevicesIds: []string{"widget-1"}},
		},
	})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if p.EnvVar() != "CRITLET_WIDGETS" {
		t.Errorf("EnvVar() = %q, want CRITLET_WIDGETS", p.EnvVar())
	}
	wantEnvs := []string{"widget-0,widget-2", "widget-1"}
	if n := len(alloc.GetContainerResponses()); n != len(wantEnvs) {
		t.Fatalf("Allocate returned %d container responses, want %d", n, len(wantEnvs))
	}
	for i, cr := range alloc.GetContainerResponses() {
		if got := cr.GetEnvs()["CRITLET_WIDGETS"]; got != wantEnvs[i] {
			t.Errorf("container %d: CRITLET_WIDGETS = %q, want %q (envs %v)", i, got, wantEnvs[i], cr.GetEnvs())
		}
	}
	wantAllocated := []string{"widget-0", "widget-2", "widget-1"}
	if got := p.Allocated(); !slices.Equal(got, wantAllocated) {
		t.Errorf("Allocated() = %v, want %v", got, wantAllocated)
	}

	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"widget-1", "gadget-7"}}},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of unknown device: err = %v, want InvalidArgument", err)
	}
	if got := p.Allocated(); !slices.Equal(got, wantAllocated) {
		t.Errorf("Allocated() after rejected Allocate = %v, want unchanged %v", got, wantAllocated)
	}

	if resp, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{}); err != nil || len(resp.GetContainerResponses()) != 0 {
		t.Errorf("GetPreferredAllocation = %v, %v; want empty response", resp, err)
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"widget-0"}}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}

	select {
	case err := <-streamEnded:
		t.Fatalf("ListAndWatch stream ended before Stop: %v", err)
	default:
	}

	p.Stop()
	select {
	case err := <-streamEnded:
		if err == nil {
			t.Errorf("ListAndWatch sent another message instead of ending on Stop")
		}
	case <-time.After(waitTimeout):
		t.Fatalf("ListAndWatch stream still open %v after Stop", waitTimeout)
	}
	if _, err := os.Stat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Stop: stat err = %v, want not-exist", err)
	}
	p.Stop() // must be a no-op
	if got := p.Allocated(); !slices.Equal(got, wantAllocated) {
		t.Errorf("Allocated() after Stop = %v, want %v", got, wantAllocated)
	}
}

func TestPluginReregistersWhenSocketRemoved(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	kubelet := startFakeKubelet(t, dir)
	p := startPlugin(t, ctx, Config{Dir: dir, ResourceName: testResource, Devices: 2})
	socket := filepath.Join(dir, kubelet.nextRegistration(t).GetEndpoint())

	if err := os.Remove(socket); err != nil {
		t.Fatalf("removing plugin socket: %v", err)
	}
	req := kubelet.nextRegistration(t)
	if got := filepath.Join(dir, req.GetEndpoint()); got != socket {
		t.Errorf("re-registered endpoint %s, want %s", got, socket)
	}
	if !socketExists(socket) {
		t.Fatalf("socket %s not re-created", socket)
	}
	_, list := firstDeviceList(t, ctx, pluginClient(t, socket))
	checkHealthyDevices(t, list, p.DeviceIDs())
}

// TestPluginReregistersAfterKubeletRestart mimics the kubelet's restart
// sequence: it goes away, wipes every socket in the directory, and only
// later listens again, so the first re-registration attempts fail.
func TestPluginReregistersAfterKubeletRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	old := startFakeKubelet(t, dir)
	p := startPlugin(t, ctx, Config{Dir: dir, ResourceName: testResource, Devices: 1})
	socket := filepath.Join(dir, old.nextRegistration(t).GetEndpoint())

	old.stop()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("wiping %s: %v", e.Name(), err)
		}
	}
	// The plugin re-creates its socket before trying to register, so once
	// it is back the plugin is retrying against a missing kubelet.
	waitFor(t, "plugin socket to be re-created", func() bool { return socketExists(socket) })

	restarted := startFakeKubelet(t, dir)
	req := restarted.nextRegistration(t)
	if req.GetResourceName() != testResource {
		t.Errorf("re-registered resource = %q, want %q", req.GetResourceName(), testResource)
	}
	_, list := firstDeviceList(t, ctx, pluginClient(t, socket))
	checkHealthyDevices(t, list, p.DeviceIDs())
}

func TestPluginStopsWhenContextEnds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir := shortTempDir(t)
	kubelet := startFakeKubelet(t, dir)
	p := startPlugin(t, ctx, Config{Dir: dir, ResourceName: testResource, Devices: 1})
	socket := filepath.Join(dir, kubelet.nextRegistration(t).GetEndpoint())

	cancel()
	waitFor(t, "plugin socket removal after context cancellation", func() bool {
		_, err := os.Stat(socket)
		return errors.Is(err, fs.ErrNotExist)
	})
	p.Stop()
}

// TestStopLeavesForeignSocket checks that cleanup does not delete a file
// that replaced the plugin's socket at the same path.
func TestStopLeavesForeignSocket(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	kubelet := startFakeKubelet(t, dir)
	p := startPlugin(t, ctx, Config{Dir: dir, ResourceName: testResource, Devices: 1})
	socket := filepath.Join(dir, kubelet.nextRegistration(t).GetEndpoint())
	ours, err := os.Stat(socket)
	if err != nil {
		t.Fatalf("stat plugin socket: %v", err)
	}
	p.Stop()

	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatalf("creating foreign file: %v", err)
	}
	p.removeSocket(ours)
	if _, err := os.Stat(socket); err != nil {
		t.Errorf("foreign file at %s removed by plugin cleanup: %v", socket, err)
	}

	// Sanity check that removeSocket does remove a file it owns, so the
	// check above is meaningful.
	foreign, err := os.Stat(socket)
	if err != nil {
		t.Fatalf("stat foreign file: %v", err)
	}
	p.removeSocket(foreign)
	if _, err := os.Stat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removeSocket with matching identity left %s: stat err = %v", socket, err)
	}
}

func TestStartFailsWithoutKubelet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	_, err := Start(ctx, Config{Dir: dir, ResourceName: testResource, Devices: 1})
	if err == nil {
		t.Fatal("Start without a kubelet socket succeeded")
	}
	if !strings.Contains(err.Error(), "registering") || !strings.Contains(err.Error(), "kubelet.sock") {
		t.Errorf("Start error %q does not say that registration with kubelet.sock failed", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	if len(entries) != 0 {
		t.Errorf("failed Start left files behind: %v", entries)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := shortTempDir(t)
	longDir := "/" + strings.Repeat("d", 100)

	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"empty dir", Config{ResourceName: testResource, Devices: 1}, "must not be empty"},
		{"relative dir", Config{Dir: "device-plugins", ResourceName: testResource, Devices: 1}, "absolute"},
		{"dir too long for a socket", Config{Dir: longDir, ResourceName: testResource, Devices: 1}, "unix socket limit"},
		{"empty resource", Config{Dir: dir, Devices: 1}, "resource name must not be empty"},
		{"unprefixed resource", Config{Dir: dir, ResourceName: "widget", Devices: 1}, "domain-prefixed"},
		{"native resource", Config{Dir: dir, ResourceName: "kubernetes.io/widget", Devices: 1}, "reserved"},
		{"native subdomain", Config{Dir: dir, ResourceName: "foo.kubernetes.io/widget", Devices: 1}, "reserved"},
		{"quota prefix", Config{Dir: dir, ResourceName: "requests.example/widget", Devices: 1}, "requests."},
		{"bad characters", Config{Dir: dir, ResourceName: "critlet.example/wid get", Devices: 1}, "not a valid extended resource name"},
		{"bad domain", Config{Dir: dir, ResourceName: "Critlet_Example/widget", Devices: 1}, "not a valid extended resource name"},
		{"zero devices", Config{Dir: dir, ResourceName: testResource}, "at least 1"},
		{"negative devices", Config{Dir: dir, ResourceName: testResource, Devices: -2}, "at least 1"},
		{"device ID too long", Config{Dir: dir, ResourceName: "critlet.example/" + strings.Repeat("w", 62), Devices: 1}, "longer than 63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(ctx, tc.cfg)
			if err == nil {
				p.Stop()
				t.Fatalf("Start(%+v) succeeded, want error containing %q", tc.cfg, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Start(%+v) error = %q, want it to contain %q", tc.cfg, err, tc.wantErr)
			}
		})
	}

	// The same checks must accept what the kubelet accepts.
	for _, name := range []string{testResource, "example.com/gpu", "a.b/c_d.e-f"} {
		if err := validate(Config{Dir: dir, ResourceName: name, Devices: 5}); err != nil {
			t.Errorf("validate(%q) = %v, want nil", name, err)
		}
	}
}

func TestEnvVarName(t *testing.T) {
	for in, want := range map[string]string{
		"widget":    "CRITLET_WIDGETS",
		"gpu.x-2_Y": "CRITLET_GPU_X_2_YS",
	} {
		if got := envVarName(in); got != want {
			t.Errorf("envVarName(%q) = %q, want %q", in, got, want)
		}
	}
}
