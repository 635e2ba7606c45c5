package isolation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/t\011ab`: "/t\tab", `/odd\`: `/odd\`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountsUnder(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	lines := "22 1 0:21 / /state/kubelet rw - ext4 a rw\n" +
		"23 22 0:22 / /state/kubelet/pods/x\\040y/vol rw - tmpfs b rw\n" +
		"24 1 0:23 / /state-other/k rw - tmpfs c rw\n" +
		"25 1 0:24 / /state rw - tmpfs d rw\n"
	if err := os.WriteFile(info, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := MountsUnder(info, "/state")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/state/kubelet/pods/x y/vol", "/state/kubelet"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("mountsUnder = %q, want %q (deepest first, only below the directory)", got, want)
	}
	if _, err := MountsUnder(filepath.Join(t.TempDir(), "none"), "/state"); err == nil {
		t.Error("a missing mountinfo file was not an error")
	}
}
