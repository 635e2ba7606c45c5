package localnode

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestCheckListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := checkListener("test", port, os.Getpid()); err != nil {
		t.Errorf("this process's own listener: %v", err)
	}
	if err := checkListener("test", port, os.Getppid()); err != nil {
		t.Errorf("a descendant of the parent: %v", err)
	}
	// A process that is no ancestor of this one.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if err := checkListener("test", port, other.Process.Pid); err == nil || !strings.Contains(err.Error(), "another program holds the port") {
		t.Errorf("err = %v, want the port named as someone else's", err)
	}
	ln.Close()
	if err := checkListener("test", port, os.Getpid()); err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Errorf("closed port: err = %v", err)
	}
}
