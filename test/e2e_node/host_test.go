//go:build e2enode

package e2enode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/critlet/critlet/internal/hoststate"
	"github.com/critlet/critlet/internal/localnode"
)

// captureHost records what a node run must leave as it found it
// (hoststate.CaptureNode).
func captureHost(stateDirs ...string) (hoststate.State, error) {
	return hoststate.CaptureNode(localnode.CgroupRoot, stateDirs...)
}

// hostUnchanged compares two records of the host.
func hostUnchanged(before, after hoststate.State, during string) error {
	if diff := hoststate.Diff(before, after); len(diff) > 0 {
		return fmt.Errorf("the host changed during %s:\n  %s", during, strings.Join(diff, "\n  "))
	}
	return nil
}

// checkLocalUpDown runs the README's commands as an operator would, twice
// at once: two `local-node up` on two state directories race for the
// host's node resources; exactly one node comes up, the other is refused
// without creating anything; `local-node down` then removes the node, and
// the host is as it was before.
func checkLocalUpDown(bin, dir string) (string, error) {
	dirs := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	for _, d := range dirs {
		if err := downIfNode(bin, d); err != nil {
			return "", err
		}
	}
	before, err := captureHost(dirs...)
	if err != nil {
		return "", err
	}
	// A directory may hold an earlier run's logs and marker.
	listings := map[string]hoststate.State{}
	for _, d := range dirs {
		listings[d] = hoststate.State{}
		listings[d].AddFiles([]string{d})
	}
	type result struct {
		out []byte
		err error
	}
	results := make([]result, len(dirs))
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(filepath.Join(bin, "local-node"), "up", "--state", d, "--bin", bin, "--kubelet", filepath.Join(bin, "kubelet"))
			results[i].out, results[i].err = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	var up, refused []int
	for i, r := range results {
		switch {
		case r.err == nil:
			up = append(up, i)
		case bytes.Contains(r.out, []byte("owns this host's node resources")):
			refused = append(refused, i)
		}
	}
	var errs []error
	if len(up) != 1 || len(refused) != 1 {
		errs = append(errs, fmt.Errorf("two concurrent ups: want one node up and one refused, got\n%s: %v\n%s\n%s: %v\n%s",
			dirs[0], results[0].err, results[0].out, dirs[1], results[1].err, results[1].out))
	} else {
		d := dirs[refused[0]]
		now := hoststate.State{}
		now.AddFiles([]string{d})
		if diff := hoststate.Diff(listings[d], now); len(diff) > 0 {
			errs = append(errs, fmt.Errorf("the refused up changed %s:\n  %s", d, strings.Join(diff, "\n  ")))
		}
	}
	for _, d := range dirs {
		errs = append(errs, downIfNode(bin, d))
	}
	after, err := captureHost(dirs...)
	if err != nil {
		return "", err
	}
	errs = append(errs, hostUnchanged(before, after, "local-node up and down"))
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return fmt.Sprintf("two concurrent `local-node up`: %s came up, %s was refused and created nothing; after `local-node down` the host was as before", filepath.Base(dirs[up[0]]), filepath.Base(dirs[refused[0]])), nil
}

// downIfNode runs local-node down on a directory that holds a node.
func downIfNode(bin, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".critlet-local-node")); err != nil {
		return nil
	}
	if out, err := exec.Command(filepath.Join(bin, "local-node"), "down", "--state", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("local-node down --state %s: %v\n%s", dir, err, out)
	}
	return nil
}
