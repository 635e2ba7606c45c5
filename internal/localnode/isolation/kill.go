package isolation

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/hoststate"
	"github.com/critlet/critlet/internal/localnode/process"
)

// KillShims kills the runc shims that serve the containerd at socket; they
// outlive containerd by design.
func KillShims(socket string) error {
	// A listing misses a shim started after it began (a shim's start forks
	// the shim that serves): list again until a listing finds none.
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := shims(socket)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shims %v still run 10s after the first SIGKILL", pids)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing shim %d: %w", pid, err)
			}
		}
		// Their state is removed next: wait until they are gone.
		for _, pid := range pids {
			for process.Runs(pid) {
				if time.Now().After(deadline) {
					return fmt.Errorf("shim %d survived SIGKILL", pid)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// shims lists the runc shims that serve the containerd at socket. One in
// the middle of execve, its command line not yet laid out, is waited for
// (hoststate.Processes), not missed.
func shims(socket string) ([]int, error) {
	all, err := hoststate.Processes()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range all {
		if len(p.Args) == 0 || !strings.Contains(p.Args[0], "containerd-shim") {
			continue
		}
		for i, a := range p.Args {
			if a == "-address" && i+1 < len(p.Args) && p.Args[i+1] == socket {
				pids = append(pids, p.PID)
				break
			}
		}
	}
	return pids, nil
}

// KillUntilGone sends SIGKILL to the processes list returns until it
// returns none, for at most 15 seconds; what says where they are, for the
// error.
func KillUntilGone(what string, list func() ([]int, error)) error {
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
