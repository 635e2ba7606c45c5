//go:build linux

// Command pause is the first process of a pod sandbox. It only holds the
// pod's namespaces open until the runtime stops it with SIGTERM or SIGINT,
// then exits 0. When it is PID 1 of a shared PID namespace, processes
// orphaned in the pod are re-parented to it, so it reaps them: otherwise
// they would stay zombies until the pod is deleted.
//
// Build it static, with CGO_ENABLED=0, so the image needs no libc.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is meant to be set with -ldflags "-X main.version=...".
var version = "devel"

func main() {
	// Installed first: until then SIGTERM would kill the process with a
	// signal status instead of exit 0 (except as PID 1, where the kernel
	// drops signals that have no handler).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)

	showVersion := flag.Bool("v", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("pause", version)
		return
	}

	// Children that exited before the handler was installed sent a SIGCHLD
	// that nobody saw.
	reap()
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child. SIGCHLDs coalesce, so one signal may
// stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none has exited yet
		}
	}
}
