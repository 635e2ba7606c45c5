package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/critlet/critlet/test/testenv"
)

// agnhost's image is made only from an agnhost binary; without one (a focus
// that runs no agnhost) the other images are made alone, and a binary named
// but missing is an error, never an image left out.
func TestSuiteImages(t *testing.T) {
	_, err := os.Stat("/bin/busybox")
	testenv.Need(t, "busybox-static", err)
	dir := t.TempDir()
	pause, agnhost := filepath.Join(dir, "pause"), filepath.Join(dir, "agnhost")
	for _, f := range []string{pause, agnhost} {
		if err := os.WriteFile(f, []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := func(src imageSources) []string {
		t.Helper()
		imgs, err := suiteImages(src)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, img := range imgs {
			out = append(out, img.Name)
		}
		return out
	}
	if got, want := names(imageSources{Pause: pause, Busybox: "/bin/busybox"}), []string{pauseImage, busyboxImage}; !slices.Equal(got, want) {
		t.Errorf("without agnhost: images %v, want %v", got, want)
	}
	if got, want := names(imageSources{Pause: pause, Agnhost: agnhost, Busybox: "/bin/busybox"}), []string{pauseImage, busyboxImage, agnhostImage}; !slices.Equal(got, want) {
		t.Errorf("with agnhost: images %v, want %v", got, want)
	}
	if _, err := suiteImages(imageSources{Pause: pause, Agnhost: filepath.Join(dir, "missing"), Busybox: "/bin/busybox"}); err == nil {
		t.Error("a missing agnhost binary made images")
	}
}
