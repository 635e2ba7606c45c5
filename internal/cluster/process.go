package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/critlet/critlet/internal/localnode/process"
)

// startDetached starts cmd in a session of its own, output to logPath, not
// waited for by this process (it outlives it), and returns it as a Ref
// (PID and start time: a reused PID is never taken for it).
func startDetached(name string, cmd *exec.Cmd, logPath string) (process.Ref, error) {
	// Never through a link: root would append where it points.
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return process.Ref{}, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return process.Ref{}, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	// Its start time is read before it can be reaped: until then its PID
	// is not another process's, even if it has exited at once.
	ref, err := process.Find(name, cmd.Process.Pid)
	// Reap it when it ends while this process lives; once this process
	// exits, init does.
	go func() { _ = cmd.Wait() }()
	if err != nil {
		return process.Ref{Name: name, PID: cmd.Process.Pid}, fmt.Errorf("starting %s (see %s): %w", cmd.Path, logPath, err)
	}
	ref.LogFile = logPath
	return ref, nil
}
