//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/localnode"
	"github.com/critlet/critlet/test/scratchroot"
	"github.com/critlet/critlet/test/systemdunit"
)

// installed is a kubelet as its package installs it: a root holding the
// package's files, kubeadm's drop-in beside them, and /etc/default/kubelet.
type installed struct {
	name string
	root string
}

// kubeadmDropIn is kubeadm's package's drop-in for kubelet.service.
const kubeadmDropIn = "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"

// installCritlet installs critlet's .deb into a fresh root under dir.
func installCritlet(dir string) (installed, error) {
	debs, err := filepath.Glob(filepath.Join(*packageDir, "kubelet-critlet_*_"+runtime.GOARCH+".deb"))
	if err != nil || len(debs) != 1 {
		return installed{}, fmt.Errorf("want one kubelet-critlet .deb in %s (make package), found %v %v", *packageDir, debs, err)
	}
	r, err := scratchroot.New(dir)
	if err != nil {
		return installed{}, err
	}
	if out, err := r.Install(debs[0]); err != nil {
		return installed{}, fmt.Errorf("installing %s: %w\n%s", debs[0], err, out)
	}
	return installed{name: "critlet", root: r.Dir}, addKubeadmFiles(r.Dir)
}

// installStock lays out the stock kubelet package's files under dir: its
// binary and unit (critlet's package ships upstream's unit unchanged; the
// package suite proves it).
func installStock(dir, critletRoot string) (installed, error) {
	for _, f := range []struct {
		from, to string
		mode     os.FileMode
	}{
		{filepath.Join(*binDir, "kubelet-stock"), "/usr/bin/kubelet", 0o755},
		{filepath.Join(critletRoot, "lib/systemd/system/kubelet.service"), "/lib/systemd/system/kubelet.service", 0o644},
	} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return installed{}, err
		}
		if err := writeFile(filepath.Join(dir, f.to), string(b), f.mode); err != nil {
			return installed{}, err
		}
	}
	return installed{name: "stock", root: dir}, addKubeadmFiles(dir)
}

// addKubeadmFiles adds kubeadm's drop-in, and /etc/default/kubelet as the
// stock package ships it unless the package brought one.
func addKubeadmFiles(root string) error {
	b, err := os.ReadFile("../package/testdata/10-kubeadm.conf")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, kubeadmDropIn), string(b), 0o644); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "etc/default/kubelet")); errors.Is(err, os.ErrNotExist) {
		return writeFile(filepath.Join(root, "etc/default/kubelet"), "KUBELET_EXTRA_ARGS=\n", 0o644)
	}
	return err
}

// linkNode makes the root's /etc/kubernetes and /var/lib/kubelet the node's,
// where kubeadm writes the kubelet's flags file and configuration, so that
// the unit reads them as systemd would on the node.
func (k installed) linkNode(cfg localnode.Config) error {
	for dir, node := range map[string]string{
		"/etc/kubernetes":  cfg.PrivateDir("/etc/kubernetes"),
		"/var/lib/kubelet": cfg.KubeletRootMount(),
	} {
		p := filepath.Join(k.root, dir)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(node, p); err != nil {
			return err
		}
	}
	return nil
}

// setExtraArgs writes /etc/default/kubelet, as an operator edits it.
func (k installed) setExtraArgs(args string) error {
	return writeFile(filepath.Join(k.root, "etc/default/kubelet"), "KUBELET_EXTRA_ARGS="+args+"\n", 0o644)
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), mode)
}

// systemdPath is the PATH systemd gives a service.
const systemdPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// service plays systemd's part for kubelet.service on a node without an
// init system: each start resolves the unit afresh (drop-ins and
// environment files are read at start, as systemd reads them), runs the
// command inside the node, and, as Restart=always demands, starts it again
// RestartSec after it exits. kubeadm, finding no init system, restarts
// nothing: restart does what `systemctl restart kubelet` would.
type service struct {
	node    *localnode.Node
	k       installed
	logPath string
	workDir string        // an empty directory of the suite's: the kubelet writes nothing elsewhere by mistake
	delay   time.Duration // RestartSec=

	now     chan struct{} // start again without waiting
	stopped chan struct{} // closed by stop
	done    chan struct{} // closed when the loop has ended

	mu       sync.Mutex
	stopping bool
	proc     *os.Process
	starts   int
	exits    []string
}

// startService reads the unit's restart settings and starts the loop.
func startService(n *localnode.Node, k installed, logPath, workDir string) (*service, error) {
	opts, err := systemdunit.Load(k.root, "kubelet.service")
	if err != nil {
		return nil, err
	}
	restart, delay := "", 100*time.Millisecond // systemd's RestartSec default
	for _, o := range opts {
		switch {
		case o.Section != "Service":
		case o.Name == "Restart":
			restart = o.Value
		case o.Name == "RestartSec":
			if s, err := strconv.Atoi(o.Value); err == nil {
				delay = time.Duration(s) * time.Second
			} else if delay, err = time.ParseDuration(o.Value); err != nil {
				return nil, fmt.Errorf("%s: RestartSec=%s: %w", o.File, o.Value, err)
			}
		}
	}
	if restart != "always" {
		return nil, fmt.Errorf("kubelet.service has Restart=%s; this supervisor plays Restart=always only", restart)
	}
	s := &service{node: n, k: k, logPath: logPath, workDir: workDir, delay: delay,
		now: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s, nil
}

func (s *service) loop() {
	defer close(s.done)
	for {
		s.runOnce()
		select {
		case <-s.stopped:
			return
		case <-s.now:
		case <-time.After(s.delay):
		}
	}
}

// runOnce starts the unit's command, unless the service is stopping, and
// waits for it to exit.
func (s *service) runOnce() {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.exited(fmt.Sprintf("log: %v", err))
		return
	}
	defer logf.Close()
	unit, err := systemdunit.Resolve(s.k.root, "kubelet.service")
	if err != nil {
		s.exited(fmt.Sprintf("resolving the unit: %v", err))
		return
	}
	cmd, err := s.node.Command(context.Background(), s.workDir, filepath.Join(s.k.root, unit.Path), unit.Argv[1:]...)
	if err != nil {
		s.exited(fmt.Sprintf("entering the node: %v", err))
		return
	}
	cmd.Env = append([]string{systemdPath}, unit.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	fmt.Fprintf(logf, "--- %s: systemd would run: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(unit.Argv, " "))
	// Started under the lock: stop either sees the process or prevents it.
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.exited(fmt.Sprintf("start: %v", err))
		return
	}
	s.proc = cmd.Process
	s.starts++
	s.mu.Unlock()
	err = cmd.Wait()
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
	s.exited(fmt.Sprint(err))
}

func (s *service) exited(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exits = append(s.exits, why)
}

// restart is `systemctl restart kubelet`: SIGTERM, then a start at once.
func (s *service) restart() {
	select {
	case s.now <- struct{}{}:
	default:
	}
	s.signal(syscall.SIGTERM)
}

func (s *service) signal(sig syscall.Signal) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		_ = p.Signal(sig)
	}
}

// stop is `systemctl stop kubelet`: no start after it; SIGTERM, then
// SIGKILL after systemd's 90 s. Stopping a stopped service does nothing.
func (s *service) stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.stopping = true
	p := s.proc
	s.mu.Unlock()
	close(s.stopped)
	if p != nil {
		_ = p.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.signal(syscall.SIGKILL)
		<-s.done
	}
}

// started reports how often the kubelet was started, and why each run
// ended.
func (s *service) started() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts, append([]string(nil), s.exits...)
}
