package hoststate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process is a process with its command line.
type Process struct {
	PID int
	// Args is the command line; empty for kernel threads, zombies and a
	// process that showed none within the listing's wait.
	Args []string
}

// A process in the middle of execve reads an empty /proc/PID/cmdline: the
// kernel switches it to the new image's memory, which releases a vfork
// parent and closes the close-on-exec pipe (exec.Cmd.Start returns), before
// it maps the program and its interpreter and lays the arguments out. Read
// at once, four in ten `sleep` starts on two busy cores read empty, and the
// window is longer when the program is not in the page cache (a fresh
// machine). A listing that drops empty command lines misses just-started
// processes, so such a process is read again until its arguments show.
// Kernel threads and exiting processes read empty for good and are not
// waited for.
const (
	// execWait bounds what one listing waits, all processes together.
	execWait = 2 * time.Second
	// execPoll is the pause between two reads of one process.
	execPoll = 2 * time.Millisecond
)

// Processes lists the host's processes, each with its command line. A
// process between fork and exec shows its parent's command line; one
// forked after the listing began may be missing: a caller that must leave
// none behind lists again.
func Processes() ([]Process, error) {
	pids, err := PIDs()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(execWait)
	var out []Process
	for _, pid := range pids {
		args, ok := commandLine(os.ReadFile, filepath.Join("/proc", strconv.Itoa(pid)), deadline)
		if ok {
			out = append(out, Process{PID: pid, Args: args})
		}
	}
	return out, nil
}

// PIDs lists the host's process IDs, as /proc holds them.
func PIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// commandLine reads the command line of the process whose /proc directory
// is dir, through read; false when the process is gone. An empty one is
// read again, after execPoll, until deadline unless it is final.
func commandLine(read func(string) ([]byte, error), dir string, deadline time.Time) ([]string, bool) {
	for {
		b, err := read(filepath.Join(dir, "cmdline"))
		if err != nil {
			return nil, false
		}
		if len(b) > 0 {
			return splitArgs(b), true
		}
		stat, err := read(filepath.Join(dir, "stat"))
		if err != nil {
			return nil, false
		}
		if emptyForGood(stat) || !time.Now().Before(deadline) {
			return nil, true
		}
		time.Sleep(execPoll)
	}
}

// splitArgs splits a /proc/PID/cmdline: arguments each ended by a NUL (a
// process that rewrote its arguments may leave several at the end).
func splitArgs(cmdline []byte) []string {
	return strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
}

// Process flags (include/linux/sched.h) under which a process has no
// command line for good.
const (
	pfExiting = 0x00000004
	pfKthread = 0x00200000
)

// emptyForGood reports whether a process whose /proc/PID/stat is stat has
// no command line for good: a kernel thread, or a process exiting or dead.
// A stat that does not parse counts as final, so that it is not waited on.
func emptyForGood(stat []byte) bool {
	// pid (comm) state ppid pgrp session tty_nr tpgid flags …; comm may
	// hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 7 {
		return true
	}
	if f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return true
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err != nil || flags&(pfExiting|pfKthread) != 0
}
