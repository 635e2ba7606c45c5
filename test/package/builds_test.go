//go:build packagecheck

package packagetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Packages several tests install are built once per run (building packs
// the 100 MB kubelets): into buildsDir, which TestMain removes.
var (
	buildsDir string
	builds    sync.Map // name -> *build
)

type build struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "critlet-package-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildsDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shared returns the directory fill filled the first time a test asked
// for name: fill gets an empty directory and reports what it could not
// build.
func shared(t *testing.T, name string, fill func(dir string) error) string {
	t.Helper()
	v, _ := builds.LoadOrStore(name, &build{})
	b := v.(*build)
	b.once.Do(func() {
		b.dir = filepath.Join(buildsDir, name)
		if b.err = os.Mkdir(b.dir, 0o755); b.err == nil {
			b.err = fill(b.dir)
		}
	})
	if b.err != nil {
		t.Fatalf("building %s: %v", name, b.err)
	}
	return b.dir
}
