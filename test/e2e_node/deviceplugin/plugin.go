// Package deviceplugin is a minimal kubelet device plugin for node end-to-end
// tests. It advertises a fixed number of always-healthy fake devices under an
// extended resource name, so that a real kubelet exercises its device-manager
// admission path without any hardware.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// pollInterval is how often the plugin checks that its socket still
	// exists; the kubelet wipes the directory on restart and only learns
	// about plugins again when they re-register.
	pollInterval = 500 * time.Millisecond

	// registerTimeout bounds one Register call. The kubelet dials back and
	// queries the plugin before answering, so allow for a slow node.
	registerTimeout = 10 * time.Second

	// readyTimeout bounds the self-check that the gRPC server answers.
	readyTimeout = 5 * time.Second

	// maxSocketPath is the usable length of sockaddr_un.sun_path on Linux
	// (108 bytes including the terminating NUL).
	maxSocketPath = 107

	// maxDeviceIDLength is the limit documented on pluginapi.Device.ID.
	maxDeviceIDLength = 63
)

// Config describes the fake devices to advertise.
type Config struct {
	// Dir is the kubelet's device-plugin directory
	// (<kubelet root-dir>/device-plugins), which holds kubelet.sock.
	Dir string
	// ResourceName is the extended resource to advertise, e.g.
	// "critlet.example/widget".
	ResourceName string
	// Devices is how many healthy devices to advertise.
	Devices int
}

// Plugin is a running device plugin. Create it with Start.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg         Config
	socketPath  string
	kubeletSock string
	envVar      string
	deviceIDs   []string
	known       map[string]bool
	logger      klog.Logger

	// ctx ends when the plugin stops, which also ends open ListAndWatch
	// streams.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// srvMu guards the serving state, which the supervision goroutine
	// replaces after a kubelet restart.
	srvMu    sync.Mutex
	server   *grpc.Server
	serveErr chan error
	sockInfo fs.FileInfo

	allocMu   sync.Mutex
	allocated []string
}

// Start serves the device plugin API on a unix socket in cfg.Dir and
// registers it with the kubelet. The plugin keeps re-registering after
// kubelet restarts until Stop is called or ctx ends.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("invalid device plugin config: %w", err)
	}
	dir := filepath.Clean(cfg.Dir)
	shortName := resourceShortName(cfg.ResourceName)

	p := &Plugin{
		cfg:         cfg,
		socketPath:  filepath.Join(dir, socketName(cfg.ResourceName)),
		kubeletSock: filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
		envVar:      envVarName(shortName),
		deviceIDs:   deviceIDs(shortName, cfg.Devices),
		known:       make(map[string]bool, cfg.Devices),
		done:        make(chan struct{}),
	}
	for _, id := range p.deviceIDs {
		p.known[id] = true
	}
	p.logger = klog.FromContext(ctx).WithValues("resource", cfg.ResourceName, "socket", p.socketPath)
	p.ctx, p.cancel = context.WithCancel(ctx)

	if err := p.serve(); err != nil {
		p.cancel()
		return nil, err
	}
	if err := p.register(p.ctx); err != nil {
		p.cancel()
		p.teardown()
		return nil, err
	}
	p.logger.Info("Device plugin registered with kubelet", "devices", len(p.deviceIDs))

	go p.supervise()
	return p, nil
}

// Stop stops serving and removes the plugin's socket. It is safe to call
// more than once and after the Start context has ended.
func (p *Plugin) Stop() {
	p.cancel()
	<-p.done
}

// Allocated returns the device IDs the kubelet has asked to allocate so far,
// in request order.
func (p *Plugin) Allocated() []string {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	return append([]string(nil), p.allocated...)
}

// DeviceIDs returns the IDs of the advertised devices.
func (p *Plugin) DeviceIDs() []string {
	return append([]string(nil), p.deviceIDs...)
}

// EnvVar returns the name of the environment variable that Allocate sets in
// containers to the comma-separated allocated device IDs.
func (p *Plugin) EnvVar() string {
	return p.envVar
}

// GetDevicePluginOptions reports that neither PreStartContainer nor
// GetPreferredAllocation needs to be called.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the full device list once; devices never change
// health, so the stream then just stays open until the plugin stops or the
// kubelet goes away.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devs := make([]*pluginapi.Device, 0, len(p.deviceIDs))
	for _, id := range p.deviceIDs {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return fmt.Errorf("sending device list: %w", err)
	}
	p.logger.V(2).Info("Sent device list", "devices", len(devs))
	select {
	case <-stream.Context().Done():
	case <-p.ctx.Done():
	}
	return nil
}

// Allocate answers each container request with an environment variable
// naming its devices, which lets tests see the allocation from inside the
// container.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{
		ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.GetContainerRequests())),
	}
	var ids []string
	for _, creq := range req.GetContainerRequests() {
		for _, id := range creq.GetDevicesIds() {
			// The kubelet only hands out advertised IDs; anything else
			// points at a bug worth surfacing rather than masking.
			if !p.known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "unknown device %q for resource %s", id, p.cfg.ResourceName)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{p.envVar: strings.Join(creq.GetDevicesIds(), ",")},
		})
		ids = append(ids, creq.GetDevicesIds()...)
	}
	p.allocMu.Lock()
	p.allocated = append(p.allocated, ids...)
	p.allocMu.Unlock()
	p.logger.Info("Allocated devices", "devices", ids)
	return resp, nil
}

// GetPreferredAllocation is never called because the options say so; it
// answers with no preference.
func (p *Plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer is never called because the options say so; there is
// nothing to prepare for fake devices anyway.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// supervise re-creates the socket and re-registers whenever the socket is
// gone (the kubelet deletes all sockets when it restarts), until the plugin
// stops.
func (p *Plugin) supervise() {
	defer close(p.done)
	defer p.teardown()

	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()

	registered := true
	failures := 0
	for {
		select {
		case <-p.ctx.Done():
			p.logger.Info("Stopping device plugin")
			return
		case <-ticker.C:
		}

		if !p.socketIntact() {
			p.logger.Info("Device plugin socket disappeared, assuming kubelet restart")
			p.stopServing()
			if err := p.serve(); err != nil {
				p.logger.Error(err, "Failed to serve device plugin again, will retry")
				continue
			}
			registered = false
			failures = 0
		}
		if registered {
			continue
		}
		// The restarted kubelet may not be listening yet, so failures here
		// are expected for a while; log them sparsely.
		if err := p.register(p.ctx); err != nil {
			failures++
			if failures == 1 || failures%20 == 0 {
				p.logger.Error(err, "Failed to re-register device plugin, will retry", "attempts", failures)
			}
			continue
		}
		registered = true
		p.logger.Info("Device plugin re-registered with kubelet", "attempts", failures+1)
	}
}

// serve listens on the plugin socket, starts the gRPC server and returns
// once the server answers requests, because the kubelet dials back as soon
// as it gets the Register call.
func (p *Plugin) serve() error {
	if err := os.Remove(p.socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale device plugin socket %s: %w", p.socketPath, err)
	}
	ln, err := net.Listen("unix", p.socketPath)
	if err != nil {
		return fmt.Errorf("listening on device plugin socket %s: %w", p.socketPath, err)
	}
	// Closing the listener must not unlink the path: after a kubelet
	// restart the path may already belong to a new socket. Removal is
	// done explicitly, and only while the file is still ours.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	info, err := os.Stat(p.socketPath)
	if err != nil {
		ln.Close()
		return fmt.Errorf("inspecting device plugin socket %s: %w", p.socketPath, err)
	}

	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	p.srvMu.Lock()
	p.server, p.serveErr, p.sockInfo = srv, serveErr, info
	p.srvMu.Unlock()

	if err := p.waitServing(); err != nil {
		p.stopServing()
		p.removeSocket(info)
		return err
	}
	return nil
}

// waitServing calls the plugin's own API over its socket.
func (p *Plugin) waitServing() error {
	conn, err := dialUnix(p.socketPath)
	if err != nil {
		return fmt.Errorf("creating client for device plugin socket %s: %w", p.socketPath, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(p.ctx, readyTimeout)
	defer cancel()
	_, err = pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("device plugin server on %s not answering: %w", p.socketPath, err)
	}
	return nil
}

// register announces the plugin to the kubelet's Registration service.
func (p *Plugin) register(ctx context.Context) error {
	conn, err := dialUnix(p.kubeletSock)
	if err != nil {
		return fmt.Errorf("creating client for kubelet socket %s: %w", p.kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socketPath),
		ResourceName: p.cfg.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet at %s: %w", p.cfg.ResourceName, p.kubeletSock, err)
	}
	return nil
}

// socketIntact reports whether the socket file is still the one this plugin
// created; a new file at the same path counts as gone.
func (p *Plugin) socketIntact() bool {
	p.srvMu.Lock()
	ours := p.sockInfo
	p.srvMu.Unlock()
	if ours == nil {
		return false
	}
	cur, err := os.Stat(p.socketPath)
	return err == nil && sameFile(ours, cur)
}

// stopServing stops the gRPC server, ending open streams, and waits for it.
func (p *Plugin) stopServing() {
	p.srvMu.Lock()
	srv, serveErr := p.server, p.serveErr
	p.server, p.serveErr = nil, nil
	p.srvMu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	if err := <-serveErr; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		p.logger.Error(err, "Device plugin server ended with error")
	}
}

// teardown stops serving and removes the socket if it is still ours.
func (p *Plugin) teardown() {
	p.stopServing()
	p.srvMu.Lock()
	info := p.sockInfo
	p.sockInfo = nil
	p.srvMu.Unlock()
	if info != nil {
		p.removeSocket(info)
	}
}

// removeSocket deletes the socket path only if it still refers to the file
// described by info, so a socket created by someone else is left alone.
func (p *Plugin) removeSocket(info fs.FileInfo) {
	cur, err := os.Stat(p.socketPath)
	if err != nil || !sameFile(info, cur) {
		return
	}
	if err := os.Remove(p.socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.logger.Error(err, "Failed to remove device plugin socket")
	}
}

// sameFile is os.SameFile hardened against inode reuse: filesystems such as
// tmpfs hand a just-freed inode number to the next file created, so mode and
// modification time must match as well.
func sameFile(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Mode() == b.Mode() && a.ModTime().Equal(b.ModTime())
}

func dialUnix(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The default authority would be the socket path, which is not a
		// valid :authority header value.
		grpc.WithAuthority("localhost"),
	)
}

// validate rejects configs the kubelet would refuse or that cannot work.
func validate(cfg Config) error {
	var errs []error
	if cfg.Dir == "" {
		errs = append(errs, errors.New("device plugin directory (Dir) must not be empty"))
	} else if !filepath.IsAbs(cfg.Dir) {
		// The kubelet resolves Endpoint against its own absolute directory.
		errs = append(errs, fmt.Errorf("device plugin directory (Dir) %q must be an absolute path", cfg.Dir))
	}
	if err := validateResourceName(cfg.ResourceName); err != nil {
		errs = append(errs, err)
	}
	if cfg.Devices < 1 {
		errs = append(errs, fmt.Errorf("number of devices (Devices) must be at least 1, got %d", cfg.Devices))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	dir := filepath.Clean(cfg.Dir)
	for _, path := range []string{
		filepath.Join(dir, socketName(cfg.ResourceName)),
		filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
	} {
		if len(path) > maxSocketPath {
			errs = append(errs, fmt.Errorf("socket path %q is %d bytes, longer than the unix socket limit of %d", path, len(path), maxSocketPath))
		}
	}
	last := deviceIDs(resourceShortName(cfg.ResourceName), cfg.Devices)[cfg.Devices-1]
	if len(last) > maxDeviceIDLength {
		errs = append(errs, fmt.Errorf("device ID %q is longer than %d characters", last, maxDeviceIDLength))
	}
	return errors.Join(errs...)
}

// validateResourceName applies the kubelet's extended-resource check
// (IsExtendedResourceName in pkg/apis/core/v1) so that a bad name fails
// here with a reason rather than as an opaque Register error.
func validateResourceName(name string) error {
	switch {
	case name == "":
		return errors.New("resource name must not be empty")
	case !strings.Contains(name, "/"):
		return fmt.Errorf("resource name %q must be domain-prefixed (e.g. example.com/widget)", name)
	case strings.Contains(name, corev1.ResourceDefaultNamespacePrefix):
		return fmt.Errorf("resource name %q must not use the reserved %s domain", name, corev1.ResourceDefaultNamespacePrefix)
	case strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix):
		return fmt.Errorf("resource name %q must not start with %q", name, corev1.DefaultResourceRequestsPrefix)
	}
	// Quota tracks extended resources as "requests.<name>", which must be a
	// qualified name too.
	if msgs := content.IsQualifiedName(corev1.DefaultResourceRequestsPrefix + name); len(msgs) > 0 {
		return fmt.Errorf("resource name %q is not a valid extended resource name: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// resourceShortName returns the part after the domain, e.g. "widget".
func resourceShortName(resourceName string) string {
	return resourceName[strings.LastIndex(resourceName, "/")+1:]
}

// socketName derives the socket file name from the resource name so that
// plugins for different resources can share the directory.
func socketName(resourceName string) string {
	return "critlet-" + strings.ReplaceAll(resourceName, "/", "_") + ".sock"
}

func deviceIDs(shortName string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = shortName + "-" + strconv.Itoa(i)
	}
	return ids
}

// envVarName turns "widget" into "CRITLET_WIDGETS"; characters that are not
// allowed in shell variable names become underscores.
func envVarName(shortName string) string {
	return "CRITLET_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		default:
			return '_'
		}
	}, shortName) + "S"
}
