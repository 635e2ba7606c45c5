package localnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Directories a mistyped STATE_DIR could name are refused by Up and Down
// alike, and lose nothing.
func TestCheckStateDir(t *testing.T) {
	tmp := t.TempDir()
	full := filepath.Join(tmp, "full")
	marked := filepath.Join(tmp, "marked")
	empty := filepath.Join(tmp, "empty")
	for _, d := range []string{full, marked, empty} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(full, "images"), filepath.Join(marked, markerFile), filepath.Join(marked, "logs")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	toEtc := filepath.Join(tmp, "etc-link")
	if err := os.Symlink("/etc", toEtc); err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		"/":                         "system or home directory",
		"/var":                      "system or home directory",
		"/var/lib/":                 "system or home directory",
		"/run":                      "system or home directory",
		toEtc:                       "system or home directory",
		home:                        "system or home directory",
		full:                        "no local node created it",
		marked:                      "",
		empty:                       "",
		filepath.Join(tmp, "fresh"): "",
	} {
		err := checkStateDir(dir)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("checkStateDir(%s) = %v, want %q", dir, err, want)
		}
	}

	// Down refuses the same, and an unclaimed directory is reported as
	// such, with its files still there.
	if err := Down(Config{StateDir: full}); err == nil || errors.Is(err, ErrNotANode) {
		t.Errorf("Down on a full directory no node created: %v", err)
	}
	if err := Down(Config{StateDir: empty}); !errors.Is(err, ErrNotANode) {
		t.Errorf("Down on an empty directory: %v, want ErrNotANode", err)
	}
	if err := Down(Config{StateDir: "/"}); err == nil || !strings.Contains(err.Error(), "system or home directory") {
		t.Errorf("Down on /: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "images")); err != nil {
		t.Errorf("a refused directory lost a file: %v", err)
	}
}
