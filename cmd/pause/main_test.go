//go:build linux

package main

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary plays three parts, chosen by this variable: the pause
// program itself ("pause"), the pause program with a child it must reap
// ("parent"), and that child ("child"), which exits when its stdin closes.
const roleEnv = "PAUSE_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "pause":
		main()
		os.Exit(0)
	case "parent":
		// The child's stdin is fd 3, the read end of a pipe the test holds,
		// so the test decides when the child exits.
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), roleEnv+"=child")
		child.Stdin = os.NewFile(3, "child-stdin")
		if err := child.Start(); err != nil {
			os.Stderr.WriteString("starting child: " + err.Error() + "\n")
			os.Exit(2)
		}
		child.Stdin.(*os.File).Close()
		os.Stdout.WriteString(strconv.Itoa(child.Process.Pid) + "\n")
		main()
		os.Exit(0)
	case "child":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestVersion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-v")
	cmd.Env = append(os.Environ(), roleEnv+"=pause")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pause -v: %v", err)
	}
	if got, want := string(out), "pause devel\n"; got != want {
		t.Errorf("pause -v printed %q, want %q", got, want)
	}
}

func TestStopsOnSignalAndReaps(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, childPID := startWithChild(t)
			// A child that exits while pause runs must not stay a zombie.
			// Reaping also proves the signal handler is installed, so the
			// signal below cannot arrive too early.
			waitFor(t, "child "+strconv.Itoa(childPID)+" to be reaped", func() bool {
				_, err := os.Stat("/proc/" + strconv.Itoa(childPID))
				return errors.Is(err, fs.ErrNotExist)
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("sending %v: %v", sig, err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("pause after %v: %v, want exit status 0", sig, err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("pause still running 10s after %v", sig)
			}
		})
	}
}

// startWithChild starts pause with one child process and returns pause's
// command and the child's PID. The child exits on return, 100ms after it
// started, by then most likely while pause waits for signals, so that its
// SIGCHLD is what gets it reaped.
func startWithChild(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // on failure; closed below otherwise
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=parent")
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pause: %v", err)
	}
	r.Close()
	t.Cleanup(func() { cmd.Process.Kill() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading child PID: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child PID %q: %v", line, err)
	}
	time.Sleep(100 * time.Millisecond)
	w.Close() // the child's stdin reaches EOF and it exits
	return cmd, pid
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
