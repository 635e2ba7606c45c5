//go:build e2enode

package e2enode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// unstoppableHandler is a containerd runtime handler whose runc refuses to
// signal containers while told to: the runtime "fails to stop" them, as a
// hung runtime or a process stuck in the kernel would.
const unstoppableHandler = "unstoppable"

type unstoppableRuntime struct {
	binary string // the runc wrapper containerd runs for the handler
	marker string // while this file exists, "kill" fails
}

var unstoppable unstoppableRuntime

func writeUnstoppableRuntime(dir string) (unstoppableRuntime, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return unstoppableRuntime{}, fmt.Errorf("runc: %w", err)
	}
	r := unstoppableRuntime{binary: filepath.Join(dir, "runc"), marker: filepath.Join(dir, "refuse-kill")}
	script := fmt.Sprintf(`#!/bin/sh
# runc, except that "kill" fails while %[1]s exists.
for arg in "$@"; do
  if [ "$arg" = kill ] && [ -e %[1]q ]; then
    echo "runc kill refused by the test runtime" >&2
    exit 1
  fi
done
exec %[2]q "$@"
`, r.marker, runc)
	if err := os.WriteFile(r.binary, []byte(script), 0o755); err != nil {
		return unstoppableRuntime{}, fmt.Errorf("writing the unstoppable runtime: %w", err)
	}
	return r, nil
}

// refuse makes the handler refuse kills until the test ends.
func (r unstoppableRuntime) refuse(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(r.marker, nil, 0o644); err != nil {
		t.Fatalf("arming the unstoppable runtime: %v", err)
	}
	t.Cleanup(func() { os.Remove(r.marker) })
}
