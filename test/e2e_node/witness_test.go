//go:build e2enode

package e2enode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A witness is a pod's own record of its container's life, written by the
// container into a host directory the test reads directly: each start and
// each SIGTERM received, as the kernel's uptime, and a heartbeat file
// rewritten every second. It is the runtime's view, independent of the
// statuses and events the kubelet reports (which a runtime restart can
// falsify), and it shows the moment a kill really begins: the SIGTERM, not
// the Preempting event recorded before it.
type witness struct {
	dir string // on the host, mounted at /witness
	// boot is the wall-clock time of uptime zero, to read the records.
	boot time.Time
}

// witnessScript starts by recording the start, records every SIGTERM and
// keeps going (the shell runs the trap as soon as wait is interrupted), and
// beats every second.
const witnessScript = `cat /proc/uptime >> /witness/starts
trap 'cat /proc/uptime >> /witness/sigterm' TERM
while true; do cat /proc/uptime > /witness/alive; sleep 1 & wait $!; done`

// newWitness makes the host directory for the scenario's witnessed pods. It
// is removed when the scenario ends (the pods may still be beating: the
// removal is retried until their directories are gone).
func (e *env) newWitness() *witness {
	e.t.Helper()
	dir, err := os.MkdirTemp("", "critlet-witness-")
	if err != nil {
		e.t.Fatalf("making the witness directory: %v", err)
	}
	e.t.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		e.t.Errorf("removing the witness directory %s: %v", dir, err)
	})
	up, err := uptime()
	if err != nil {
		e.t.Fatalf("reading the uptime: %v", err)
	}
	return &witness{dir: dir, boot: time.Now().Add(-up)}
}

// witnessed makes s a witnessed pod that ignores SIGTERM for a grace period
// of grace seconds.
func (w *witness) witnessed(s podSpec, grace int64) podSpec {
	s.command = []string{"/bin/sh", "-c", witnessScript}
	s.gracePeriod = &grace
	s.hostDir = filepath.Join(w.dir, s.name)
	return s
}

// lifeRecord is what a witnessed pod wrote.
type lifeRecord struct {
	starts, sigterms []time.Time
	lastBeat         time.Time // zero before the first beat
}

func (w *witness) read(p *v1.Pod) (lifeRecord, error) {
	dir := filepath.Join(w.dir, p.Name)
	var r lifeRecord
	var err error
	if r.starts, err = w.times(filepath.Join(dir, "starts")); err != nil {
		return r, err
	}
	if r.sigterms, err = w.times(filepath.Join(dir, "sigterm")); err != nil {
		return r, err
	}
	// The heartbeat file is rewritten every second until the container
	// dies: its modification time is when it was last seen alive.
	if fi, err := os.Stat(filepath.Join(dir, "alive")); err == nil {
		r.lastBeat = fi.ModTime()
	} else if !errors.Is(err, os.ErrNotExist) {
		return r, err
	}
	return r, nil
}

// times reads a file of /proc/uptime lines as wall-clock times; a missing
// file holds none.
func (w *witness) times(path string) ([]time.Time, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		d, err := parseUptime(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, w.boot.Add(d))
	}
	return out, nil
}

// mustRead is read for a test that cannot go on without the record.
func (e *env) mustRead(w *witness, p *v1.Pod) lifeRecord {
	e.t.Helper()
	r, err := w.read(p)
	if err != nil {
		e.t.Fatalf("reading %s's witness: %v", p.Name, err)
	}
	return r
}

// expectStartedOnceByRuntime checks from p's own record that its container
// started exactly once.
func (e *env) expectStartedOnceByRuntime(w *witness, p *v1.Pod) lifeRecord {
	e.t.Helper()
	r := e.mustRead(w, p)
	if len(r.starts) != 1 {
		e.t.Errorf("pod %s's container started %d times by its own record, want once", p.Name, len(r.starts))
	}
	return r
}

func uptime() (time.Duration, error) {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	return parseUptime(string(data))
}

// parseUptime reads the first field of a /proc/uptime line: seconds with
// two decimals.
func parseUptime(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty uptime line")
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("uptime line %q: %w", line, err)
	}
	return time.Duration(s * float64(time.Second)), nil
}
