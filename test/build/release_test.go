//go:build releasecheck

package build

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"
)

// TestReleaseKubelet checks a cross-built release kubelet (make release sets
// RELEASE_KUBELET to the arm64 one) without running it: its architecture,
// that it was built as the amd64 kubelet is (cgo as upstream's, -trimpath,
// this commit's version stamp, which make release also saw it print under
// qemu), and from its machine code that it runs critlet's handler.
func TestReleaseKubelet(t *testing.T) {
	bin := os.Getenv("RELEASE_KUBELET")
	if bin == "" {
		t.Fatal("RELEASE_KUBELET names no kubelet: run make release")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	machine := f.Machine
	f.Close()
	if machine != elf.EM_AARCH64 {
		t.Errorf("%s is for %s, want %s", bin, machine, elf.EM_AARCH64)
	}

	head := strings.TrimSpace(mustRun(t, "git", "rev-parse", "HEAD"))
	upstream, _ := upstreamVersion(t)
	settings := map[string]string{}
	for line := range strings.Lines(mustRun(t, "go", "version", "-m", bin)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "build" {
			k, v, _ := strings.Cut(strings.TrimPrefix(line, "\tbuild\t"), "=")
			settings[k] = strings.TrimSpace(v)
		}
	}
	for k, want := range map[string]string{"GOOS": "linux", "GOARCH": "arm64", "CGO_ENABLED": "1", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("built with %s=%q, want %q", k, settings[k], want)
		}
	}
	// -trimpath keeps -ldflags out of the build information: the stamped
	// strings are looked for in the binary itself.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{upstream + "+critlet." + head[:12], head} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("%s does not hold the version stamp %q", bin, want)
		}
	}
	checkHandler(t, "kubelet (linux/arm64)", bin, true)
}
