package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// supervisorArg0 marks a re-execution of the current binary as a
// component's supervisor.
const supervisorArg0 = "critlet-supervise"

// filesEnv tells a supervisor how many descriptors, from 3 on, it passes on
// to its component (Spec.ExtraFiles). The component does not see it.
const filesEnv = "CRITLET_SUPERVISE_FILES"

// Any binary that starts components re-executes itself as their
// supervisor, so the supervisor needs no binary of its own: the check runs
// before main (or a test's TestMain).
func init() {
	if len(os.Args) > 1 && os.Args[0] == supervisorArg0 {
		n, _ := strconv.Atoi(os.Getenv(filesEnv))
		os.Unsetenv(filesEnv)
		var files []*os.File
		for fd := 3; fd < 3+n; fd++ {
			files = append(files, os.NewFile(uintptr(fd), "fd "+strconv.Itoa(fd)))
		}
		os.Exit(supervise(os.Args[1], os.Args[2], os.Args[3:], files))
	}
}

// supervise runs one component as its parent: it passes on the signals
// meant for it, and when the component exits records how in the log (its
// stdout), so that a component that dies says so even when nobody was
// watching. It passes files on as descriptors 3 and on, and keeps no copy:
// they may hold what should live no longer than the component (a
// namespace). It exits with the component's status.
func supervise(name, path string, args []string, files []*os.File) int {
	// The component gets SIGKILL when the supervisor's thread dies, so a
	// supervisor killed outright takes its component along. Pdeathsig
	// follows the thread that forked, hence the lock.
	runtime.LockOSThread()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = files
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	err := cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		fmt.Printf("==== %s: %s could not start: %v\n", stamp(), name, err)
		return 127
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	code := 0
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	default:
		code = 1
	}
	fmt.Printf("==== %s: %s exited: %v\n", stamp(), name, describeExit(err))
	return code
}

func describeExit(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

func stamp() string { return time.Now().UTC().Format(time.RFC3339) }
