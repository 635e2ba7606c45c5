// Package process starts the local node's long-running components as
// detached, supervised processes and finds them again later by PID file, so
// that one command can start a node and another, run later, can stop it.
//
// Each component runs under a supervisor (this binary, re-executed): its
// parent for as long as it lives, even after the command that started it
// has exited. The supervisor passes signals on, records the component's exit
// in its log, and, if killed itself, takes the component along.
//
// A PID alone is not an identity: after a crash or reboot the number may
// belong to an unrelated process. Each PID file therefore also records the
// process's start time from /proc/<pid>/stat, and a process is only signalled
// when both match.
package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/critlet/critlet/internal/atomicfile"
)

// Spec describes one component.
type Spec struct {
	Name    string   // for messages, e.g. "kube-apiserver"
	Path    string   // executable
	Args    []string // arguments, without argv[0]
	Env     []string // added to the current environment
	Dir     string   // working directory
	LogFile string   // stdout and stderr are appended here
	PIDFile string
	// ExtraFiles are passed, through the supervisor, to the component as
	// descriptors 3 and on; the caller closes its copies once Start returns.
	ExtraFiles []*os.File
}

// Ref identifies a started process.
type Ref struct {
	Name    string
	PID     int
	Started uint64 // start time in clock ticks since boot
	LogFile string
}

// Handle is a process started by this process; Done is closed when it exits.
type Handle struct {
	Ref
	done chan struct{}
	err  error
}

// Done is closed when the process has exited.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Err is the process's exit error once Done is closed.
func (h *Handle) Err() error { return h.err }

// Start starts spec in a new session, so that it survives the caller and
// receives no signals meant for the caller's terminal, and records it in
// spec.PIDFile.
func Start(spec Spec) (*Handle, error) {
	// The supervisor would only report this in the log; say it here.
	path, err := exec.LookPath(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", spec.Name, spec.Path, err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: locating this binary to supervise it: %w", spec.Name, err)
	}
	// A component is told from its fork by the program it runs.
	if a, b := statFile(path), statFile(self); a != nil && b != nil && os.SameFile(a, b) {
		return nil, fmt.Errorf("%s: %s is the supervisor's own program: its component could not be told from a fork", spec.Name, spec.Path)
	}
	// Never through a link: the caller, root, would append where it points.
	logf, err := os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: opening log: %w", spec.Name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s: starting %s %s\n", time.Now().UTC().Format(time.RFC3339), spec.Path, strings.Join(spec.Args, " "))

	cmd := exec.Command(self, append([]string{spec.Name, spec.Path}, spec.Args...)...)
	cmd.Args[0] = supervisorArg0
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	if len(spec.ExtraFiles) > 0 {
		cmd.ExtraFiles = spec.ExtraFiles
		cmd.Env = append(cmd.Env, filesEnv+"="+strconv.Itoa(len(spec.ExtraFiles)))
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", spec.Name, spec.Path, err)
	}
	h := &Handle{Ref: Ref{Name: spec.Name, PID: cmd.Process.Pid, LogFile: spec.LogFile}, done: make(chan struct{})}
	go func() {
		h.err = cmd.Wait()
		close(h.done)
	}()
	started, err := startTime(h.PID)
	if err != nil {
		_ = cmd.Process.Kill()
		<-h.done
		return nil, fmt.Errorf("%s: exited at once: %w\n%s", spec.Name, err, Tail(spec.LogFile, 20))
	}
	h.Started = started
	if err := atomicfile.WriteFile(spec.PIDFile, []byte(fmt.Sprintf("%d %d %s\n", h.PID, h.Started, spec.LogFile)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		<-h.done
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	return h, nil
}

// Read returns the process recorded in pidFile. ok is false when there is no
// such file.
func Read(name, pidFile string) (ref Ref, ok bool, err error) {
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return Ref{}, false, nil
	}
	if err != nil {
		return Ref{}, false, fmt.Errorf("%s: reading PID file: %w", name, err)
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return Ref{}, false, fmt.Errorf("%s: PID file %s is malformed: %q", name, pidFile, b)
	}
	pid, err1 := strconv.Atoi(fields[0])
	started, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return Ref{}, false, fmt.Errorf("%s: PID file %s is malformed: %q", name, pidFile, b)
	}
	ref = Ref{Name: name, PID: pid, Started: started}
	if len(fields) > 2 {
		ref.LogFile = fields[2]
	}
	return ref, true, nil
}

// Find returns the running process pid as a Ref, its start time read now,
// for processes this package did not start.
func Find(name string, pid int) (Ref, error) {
	st, err := startTime(pid)
	if err != nil {
		return Ref{}, fmt.Errorf("%s (pid %d): %w", name, pid, err)
	}
	return Ref{Name: name, PID: pid, Started: st}, nil
}

// Wait waits up to d for the process to end, and reports whether it has.
func (r Ref) Wait(d time.Duration) bool { return waitGone(r, d) }

// Alive reports whether the recorded process still runs (a zombie does not).
func (r Ref) Alive() bool {
	st, err := stat(r.PID)
	return err == nil && st.started == r.Started && st.running()
}

// OpenProc opens the process's /proc directory and checks, through the
// open directory, that it is still r's process (same start time, not
// exited). A PID can be reused as soon as its process is gone; the open
// directory cannot: what is opened below it afterwards is that process's,
// or fails once it has exited, whoever has the number by then. The caller
// closes it.
func (r Ref) OpenProc() (*os.File, error) {
	path := fmt.Sprintf("/proc/%d", r.PID)
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s (pid %d): opening %s: %w", r.Name, r.PID, path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	st, err := statAt(dir)
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("%s (pid %d): %w", r.Name, r.PID, err)
	}
	switch {
	case st.started != r.Started:
		dir.Close()
		return nil, fmt.Errorf("%s (pid %d) is gone: the PID now names a process started at %d, not the one recorded, started at %d", r.Name, r.PID, st.started, r.Started)
	case !st.running():
		dir.Close()
		return nil, fmt.Errorf("%s (pid %d) is gone: it has exited", r.Name, r.PID)
	}
	return dir, nil
}

// statAt reads the stat file of the open /proc directory dir.
func statAt(dir *os.File) (procStat, error) {
	b, err := readAt(dir, "stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("%s/stat: %w", dir.Name(), err)
	}
	return st, nil
}

// readAt reads the file name below the open directory dir.
func readAt(dir *os.File, name string) ([]byte, error) {
	fd, err := syscall.Openat(int(dir.Fd()), name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s/%s: %w", dir.Name(), name, err)
	}
	f := os.NewFile(uintptr(fd), dir.Name()+"/"+name)
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	return b, nil
}

// Component returns the supervised component: the supervisor's child once
// it has executed the component's program. Until then there is none: the
// Go runtime's first start forks a probe child that exits at once
// (os.checkClonePidfd), and the component's own fork runs the supervisor's
// program until its exec.
func (r Ref) Component() (Ref, error) {
	children, err := r.Children()
	if err != nil {
		return Ref{}, err
	}
	self, err := os.Stat(fmt.Sprintf("/proc/%d/exe", r.PID))
	if err != nil {
		return Ref{}, fmt.Errorf("%s: the supervisor's program: %w", r.Name, err)
	}
	var pids []int
	for _, c := range children {
		pids = append(pids, c.PID)
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", c.PID))
		if err != nil || os.SameFile(exe, self) || !c.Alive() {
			continue // exiting, or not yet the component
		}
		c.LogFile = r.LogFile
		return c, nil
	}
	return Ref{}, fmt.Errorf("%s (pid %d) supervises no running component yet (children %v)", r.Name, r.PID, pids)
}

func statFile(path string) os.FileInfo {
	fi, _ := os.Stat(path)
	return fi
}

// Children returns the process's running children, whatever they run,
// each named as r and with its start time, each confirmed to be r's child
// (childAt). The list is read through r's /proc directory checked to be
// r's (OpenProc): by PID alone, a process that had r's PID since would
// give its own children. A child that has exited meanwhile is left out.
func (r Ref) Children() ([]Ref, error) {
	dir, err := r.OpenProc()
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	pids, err := childrenAt(dir)
	if err != nil {
		return nil, fmt.Errorf("%s (pid %d): %w", r.Name, r.PID, err)
	}
	var refs []Ref
	for _, pid := range pids {
		c, err := r.childAt(dir, pid)
		if errors.Is(err, errParentGone) {
			return nil, err
		}
		if err == nil {
			refs = append(refs, c)
		}
	}
	return refs, nil
}

// Child returns pid as a Ref, named as r, when it is r's running child
// (childAt), and an error otherwise.
func (r Ref) Child(pid int) (Ref, error) {
	dir, err := r.OpenProc()
	if err != nil {
		return Ref{}, err
	}
	defer dir.Close()
	return r.childAt(dir, pid)
}

// errParentGone marks a parent that exited while its children were read.
var errParentGone = errors.New("the parent has exited")

// childAt returns pid as a Ref, its start time read now, after confirming
// that it is r's child: its parent, read through its own /proc directory
// checked to be that process (OpenProc), is r's PID, and r's directory
// (rdir, checked when opened) shows r still running afterwards. r ran
// before and after, so its PID was r's throughout and no other process's.
// A PID from a list of children is a number only: by the time it is used,
// that child may have exited and the number gone to another process.
func (r Ref) childAt(rdir *os.File, pid int) (Ref, error) {
	c, err := Find(r.Name, pid)
	if err != nil {
		return Ref{}, err
	}
	cdir, err := c.OpenProc()
	if err != nil {
		return Ref{}, err
	}
	st, err := statAt(cdir)
	cdir.Close()
	if err != nil {
		return Ref{}, fmt.Errorf("%s (pid %d): %w", r.Name, pid, err)
	}
	if st.ppid != r.PID {
		return Ref{}, fmt.Errorf("process %d is not a child of %s (pid %d): its parent is %d", pid, r.Name, r.PID, st.ppid)
	}
	if pst, err := statAt(rdir); err != nil || !pst.running() {
		return Ref{}, fmt.Errorf("%s (pid %d): %w", r.Name, r.PID, errParentGone)
	}
	return c, nil
}

// childrenAt lists the children of the process whose /proc directory is
// dir, of every thread: each child is listed by the thread that forked it.
func childrenAt(dir *os.File) ([]int, error) {
	fd, err := syscall.Openat(int(dir.Fd()), "task", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s/task: %w", dir.Name(), err)
	}
	tasks := os.NewFile(uintptr(fd), dir.Name()+"/task")
	defer tasks.Close()
	tids, err := tasks.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", tasks.Name(), err)
	}
	var pids []int
	for _, tid := range tids {
		b, err := readAt(tasks, tid+"/children")
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) {
			continue // the thread has exited
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("malformed children list %q in %s/%s", b, tasks.Name(), tid)
			}
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Runs reports whether a process with pid exists and is not a zombie.
func Runs(pid int) bool {
	st, err := stat(pid)
	return err == nil && st.running()
}

// Stop sends SIGTERM and, after grace, SIGKILL, and waits until the process
// and the component it supervises are gone. A process that no longer runs
// is not an error.
func (r Ref) Stop(grace time.Duration) error {
	p, err := r.open()
	if err != nil {
		return nil // not running, or the PID is another process's now
	}
	defer p.Release()
	// A supervisor killed outright leaves its component to Pdeathsig, which
	// acts a moment later: wait for the component too.
	// Every child, exec'd or not: Pdeathsig reaches a fork before its exec
	// too.
	children, _ := r.Children()
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s (pid %d): SIGTERM: %w", r.Name, r.PID, err)
	}
	if !waitGone(r, grace) {
		if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("%s (pid %d): SIGKILL: %w", r.Name, r.PID, err)
		}
		if !waitGone(r, 10*time.Second) {
			return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", r.Name, r.PID)
		}
	}
	for _, c := range children {
		if !waitGone(c, 10*time.Second) {
			return fmt.Errorf("%s: supervised process %d still runs 10s after its supervisor", r.Name, c.PID)
		}
	}
	return nil
}

// open returns r's process to be signalled through a pidfd, which Go's
// os.FindProcess opens on Linux 5.3 and later: a signal sent through it
// reaches that process or none, even once its PID is another's. The pidfd
// is opened first, then the PID checked to be r's still (OpenProc): r,
// started before and running after, had the PID when it was opened.
func (r Ref) open() (*os.Process, error) {
	p, err := os.FindProcess(r.PID)
	if err != nil {
		return nil, err
	}
	dir, err := r.OpenProc()
	if err != nil {
		p.Release()
		return nil, err
	}
	dir.Close()
	return p, nil
}

func waitGone(r Ref, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !r.Alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Tail returns the last n lines of a log file, indented, for error messages.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("    (no log: %v)", err)
	}
	defer f.Close()
	// Logs can be large; the last 64 KiB hold the lines that matter.
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(-64<<10, io.SeekEnd)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    last lines of %s:\n", path)
	for _, l := range lines {
		b.WriteString("    | ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func startTime(pid int) (uint64, error) {
	st, err := stat(pid)
	return st.started, err
}

// procStat holds the fields of /proc/<pid>/stat this package reads.
type procStat struct {
	started uint64 // field 22, starttime
	state   byte   // field 3
	ppid    int    // field 4
}

// running reports whether the process has not exited (a zombie has).
func (st procStat) running() bool { return st.state != 'Z' && st.state != 'X' }

// stat reads /proc/<pid>/stat.
func stat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parseStat parses a /proc/<pid>/stat.
func parseStat(b []byte) (procStat, error) {
	// The command name may contain spaces and parentheses; fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed: no command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return procStat{}, fmt.Errorf("malformed: %d fields after the command name", len(fields))
	}
	st, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed start time: %w", err)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return procStat{}, fmt.Errorf("malformed parent PID: %w", err)
	}
	return procStat{started: st, state: fields[0][0], ppid: ppid}, nil
}
