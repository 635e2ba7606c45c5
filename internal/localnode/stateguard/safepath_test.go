package stateguard

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	sgt "github.com/critlet/critlet/internal/localnode/stateguard/stateguardtest"
)

// The rule for one entry on a state directory's path.
func TestCheckTrusted(t *testing.T) {
	dir, link, file := uint32(syscall.S_IFDIR), uint32(syscall.S_IFLNK), uint32(syscall.S_IFREG)
	for _, c := range []struct {
		name string
		uid  uint32
		mode uint32
		last bool
		want string // "" accepted
	}{
		{"root's 0755", 0, dir | 0o755, true, ""},
		{"root's 0700 parent", 0, dir | 0o700, false, ""},
		{"another user's", sgt.Nobody, dir | 0o755, true, "is owned by uid 65534"},
		{"another user's parent", sgt.Nobody, dir | 0o700, false, "is owned by uid 65534"},
		{"group-writable", 0, dir | 0o775, true, "can be written by its group or by others"},
		{"other-writable parent", 0, dir | 0o757, false, "can be written by its group or by others"},
		{"root's sticky /tmp above", 0, dir | 0o1777, false, ""},
		{"root's sticky as the state directory", 0, dir | 0o1777, true, "is a shared directory"},
		{"another user's sticky above", sgt.Nobody, dir | 0o1777, false, "is owned by uid 65534"},
		{"root's link", 0, link | 0o777, false, ""},
		{"another user's link", sgt.Nobody, link | 0o777, false, "a symbolic link owned by uid 65534"},
		{"a file", 0, file | 0o644, true, "is not a directory"},
	} {
		err := checkTrusted("/x", c.uid, c.mode, c.last)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: checkTrusted = %v, want %q", c.name, err, c.want)
		}
	}
}

// A root-owned sticky directory above a state directory (/tmp) is
// accepted, and so is a new directory below it, checked again once made;
// a name another user took first there is refused. The node's refusal of
// such a directory as its state directory itself, and of writable parents,
// is tested with Up and Down (TestStateDirUnderWritableParentIsRefused).
func TestStickyDirAbove(t *testing.T) {
	sticky := sgt.Mkdir(t, filepath.Join(t.TempDir(), "tmp"), 0o777|os.ModeSticky, 0)
	ok := sgt.Mkdir(t, filepath.Join(sticky, "node"), 0o755, 0)
	if real, err := Trust(ok); err != nil || real != ok {
		t.Errorf("a root-owned 0755 directory in a root-owned sticky one: %q, %v; want it accepted", real, err)
	}
	if _, err := Trust(filepath.Join(sticky, "new", "node")); err != nil {
		t.Errorf("a new directory below a root-owned sticky one: %v; want it accepted (checked again once made)", err)
	}
	// A name another user took first in a sticky directory, as a directory
	// or as a link, is refused when the node would create it.
	taken := sgt.Mkdir(t, filepath.Join(sticky, "taken"), 0o755, sgt.Nobody)
	if r, err := createStateDir(filepath.Join(taken, "node")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		if r != nil {
			r.Close()
		}
		t.Errorf("createStateDir below another user's directory: %v, want a refusal", err)
	}
	// The same check is made on each directory as it is opened, or made:
	// a name taken after the path was resolved is refused too.
	rootfd, err := syscall.Open("/", openFlags, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(rootfd)
	if fd, err := walkDirs(rootfd, "/", filepath.Join(taken, "node"), true, 0o755, checkTrusted); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		syscall.Close(fd)
		t.Errorf("walking through another user's directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(taken, "node")); err == nil {
		t.Error("a directory was made in another user's directory")
	}
	elsewhere := t.TempDir()
	link := filepath.Join(sticky, "linked")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, sgt.Nobody, sgt.Nobody); err != nil {
		t.Fatal(err)
	}
	if r, err := createStateDir(filepath.Join(link, "node")); err == nil || !strings.Contains(err.Error(), "symbolic link owned by uid 65534") {
		if r != nil {
			r.Close()
		}
		t.Errorf("createStateDir through another user's link: %v, want a refusal", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) > 0 {
		t.Errorf("a refused state directory was created where another user's link points: %v", entries)
	}
}

// The refusal says which path, which owner or mode, and what to do.
func TestRefusalMessage(t *testing.T) {
	dir := sgt.Mkdir(t, filepath.Join(t.TempDir(), "cn"), 0o777, 0)
	_, err := Trust(dir)
	if err == nil {
		t.Fatal("a 0777 state directory was accepted")
	}
	for _, want := range []string{"state directory " + dir + " refused", dir + " (mode 0777) can be written by its group or by others (chmod go-w " + shellQuote(dir) + ")", "STATE_DIR="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
}
