package hoststate

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/critlet/critlet/test/testenv"
)

// A process just started (exec.Cmd.Start returned) is listed with its
// command line: Start returns inside execve, where /proc/PID/cmdline reads
// empty for a moment, so the listing must wait it out. Each start is read
// at once, where the window is widest.
func TestCommandLineOfJustStartedProcesses(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for i := range 50 {
		cmd := exec.Command(sleep, "30", strconv.Itoa(i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		args, ok := commandLine(os.ReadFile, filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid)), deadline)
		cmd.Process.Kill()
		cmd.Wait()
		if want := []string{sleep, "30", strconv.Itoa(i)}; !ok || !reflect.DeepEqual(args, want) {
			t.Fatalf("start %d: command line %q (listed: %t), want %q", i, args, ok, want)
		}
	}
}

// Kernel threads have no command line for good: a listing does not wait on
// them (it would, for each, until its deadline).
func TestProcessesDoNotWaitOnKernelThreads(t *testing.T) {
	start := time.Now()
	procs, err := Processes()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var kernel int
	for _, p := range procs {
		if stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "stat")); err == nil && len(p.Args) == 0 && emptyForGood(stat) {
			kernel++
		}
	}
	if kernel == 0 {
		testenv.Need(t, "a visible kernel thread", errors.New("none in /proc: a PID namespace"))
	}
	if took >= execWait {
		t.Errorf("listing %d processes (%d with no command line for good) took %v: it waited on them", len(procs), kernel, took)
	}
}

// commandLine, on a /proc faked in memory: an empty command line is read
// again while the process may still gain one.
func TestCommandLineWaitsOutExec(t *testing.T) {
	const running = "42 (my (odd) name) R 1 42 42 0 -1 4194560 0 0"
	for name, tc := range map[string]struct {
		cmdlines []string // successive reads; the last repeats
		stat     string
		past     bool // the deadline has passed
		want     []string
		listed   bool
		reads    int
	}{
		"shown at once":       {cmdlines: []string{"sleep\x0030\x00"}, stat: running, want: []string{"sleep", "30"}, listed: true, reads: 1},
		"mid-exec":            {cmdlines: []string{"", "", "sleep\x0030\x00"}, stat: running, want: []string{"sleep", "30"}, listed: true, reads: 3},
		"rewritten arguments": {cmdlines: []string{"nginx: worker\x00\x00\x00"}, stat: running, want: []string{"nginx: worker"}, listed: true, reads: 1},
		"kernel thread":       {cmdlines: []string{""}, stat: "2 (kthreadd) S 0 0 0 0 -1 2129984 0", listed: true, reads: 1},
		"zombie":              {cmdlines: []string{""}, stat: "42 (sleep) Z 1 42 42 0 -1 4227084 0", listed: true, reads: 1},
		"exiting":             {cmdlines: []string{""}, stat: "42 (sleep) R 1 42 42 0 -1 4194564 0", listed: true, reads: 1},
		"empty past deadline": {cmdlines: []string{""}, stat: running, past: true, listed: true, reads: 1},
		"gone":                {cmdlines: nil, stat: running, listed: false, reads: 1},
	} {
		t.Run(name, func(t *testing.T) {
			reads := 0
			read := func(path string) ([]byte, error) {
				if filepath.Base(path) == "stat" {
					return []byte(tc.stat), nil
				}
				reads++
				if len(tc.cmdlines) == 0 {
					return nil, fs.ErrNotExist
				}
				return []byte(tc.cmdlines[min(reads, len(tc.cmdlines))-1]), nil
			}
			deadline := time.Now().Add(5 * time.Second)
			if tc.past {
				deadline = time.Now()
			}
			args, listed := commandLine(read, "/proc/42", deadline)
			if !reflect.DeepEqual(args, tc.want) || listed != tc.listed || reads != tc.reads {
				t.Errorf("command line %q, listed %t after %d reads; want %q, %t after %d", args, listed, reads, tc.want, tc.listed, tc.reads)
			}
		})
	}
}

func TestEmptyForGood(t *testing.T) {
	for stat, want := range map[string]bool{
		"42 (sleep) S 1 42 42 0 -1 4194560 0":          false,
		"42 (a) b) c) D 1 42 42 0 -1 4194560 0":        false, // comm "a) b) c"
		"2 (kthreadd) S 0 0 0 0 -1 2129984 0":          true,
		"42 (sleep) Z 1 42 42 0 -1 4227084 0":          true,
		"42 (sleep) X 1 42 42 0 -1 4194560 0":          true,
		"42 (sleep) R 1 42 42 0 -1 4194564 0":          true, // PF_EXITING
		"42 (sleep) S 1 42":                            true, // cut short
		"42 sleep S 1 42 42 0 -1 4194560 0":            true, // no comm
		"42 (sleep) S 1 42 42 0 -1 not-a-number 0 0 0": true,
	} {
		if got := emptyForGood([]byte(stat)); got != want {
			t.Errorf("emptyForGood(%q) = %t, want %t", stat, got, want)
		}
	}
}
