//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/critlet/critlet/internal/localnode"
)

// The node's network is its own: the API server kubeadm starts listens on
// the node's address inside it, which the host cannot reach, and no
// traffic leaves the namespace. The suite reaches it through a unix socket
// (a file, which both sides see) served by its own binary run inside the
// namespace: socket path=address, in proxyEnv.
const proxyEnv = "CRITLET_KUBEADM_API_PROXY"

// runProxy serves spec's socket, copying each connection to the address.
func runProxy(spec string) error {
	sock, addr, ok := strings.Cut(spec, "=")
	if !ok {
		return fmt.Errorf("%s=%q: want socket=address", proxyEnv, spec)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			go func() { defer wg.Done(); io.Copy(c, up); c.(*net.UnixConn).CloseWrite() }()
			wg.Wait()
		}()
	}
}

// apiProxy is a running forwarder.
type apiProxy struct {
	cmd    *exec.Cmd
	exited chan error // its Wait's result, once
}

// stop kills the forwarder and waits for it.
func (p *apiProxy) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// startProxy runs the forwarder for addr inside n's namespaces, serving
// sock, in the working directory dir, its output in logPath, until ctx
// ends or it is stopped.
func startProxy(ctx context.Context, n *localnode.Node, sock, addr, dir, logPath string) (*apiProxy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd, err := n.Command(ctx, dir, self)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd.Env = append(os.Environ(), proxyEnv+"="+sock+"="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the API proxy: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return &apiProxy{cmd: cmd, exited: exited}, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the API proxy exited before serving %s: %v (output in %s)", sock, err, logPath)
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("the API proxy did not create %s within 10s (output in %s)", sock, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clientVia is a client of kubeconfig's cluster whose connections go
// through sock; TLS still checks the server by the kubeconfig's address.
func clientVia(kubeconfig, sock string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cfg.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}
