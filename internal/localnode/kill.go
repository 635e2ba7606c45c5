package localnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
)

// killShims kills the runc shims that serve the containerd at socket; they
// outlive containerd by design.
func killShims(socket string) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing shim %d: %w", pid, err)
		}
	}
	// Their state is removed next: wait until they are gone.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for process.Runs(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("shim %d survived SIGKILL", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// killUntilGone sends SIGKILL to the processes list returns until it
// returns none, for at most 15 seconds; what says where they are, for the
// error.
func killUntilGone(what string, list func() ([]int, error)) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids, err := list()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v %s survived SIGKILL", pids, what)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing process %d %s: %w", pid, what, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}
