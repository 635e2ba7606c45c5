package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startTime is a PID's start time in clock ticks since boot (field 22 of
// /proc/PID/stat), or 0 when there is no such process.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, field 2, may hold spaces: count after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// Alive reports whether the recorded process still runs (not a zombie).
func (p Process) Alive() bool {
	if p.PID <= 0 || startTime(p.PID) != p.StartTime {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// Kill sends SIGKILL to the recorded process, if it is still that process,
// and waits up to timeout for it to go.
func (p Process) Kill(timeout time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process %d: %w", p.PID, err)
	}
	return p.wait(timeout)
}

// wait waits up to timeout for the process to end.
func (p Process) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for p.Alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still runs after %s", p.PID, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// startDetached starts cmd in a session of its own, output to logPath, not
// waited for by this process (it outlives it), and records it.
func startDetached(cmd *exec.Cmd, logPath string) (Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Process{}, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := Process{PID: cmd.Process.Pid, StartTime: startTime(cmd.Process.Pid)}
	// Reap it when it ends while this process lives; once this process
	// exits, init does.
	go func() { _ = cmd.Wait() }()
	if p.StartTime == 0 {
		return p, fmt.Errorf("%s (pid %d) exited at once; see %s", cmd.Path, p.PID, logPath)
	}
	return p, nil
}
