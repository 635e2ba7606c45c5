package localnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is a uid that is not root's: a user who could write a state
// directory it owns.
const nobody = 65534

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
		{"another user's", nobody, dir | 0o755, true, "is owned by uid 65534"},
		{"another user's parent", nobody, dir | 0o700, false, "is owned by uid 65534"},
		{"group-writable", 0, dir | 0o775, true, "can be written by its group or by others"},
		{"other-writable parent", 0, dir | 0o757, false, "can be written by its group or by others"},
		{"root's sticky /tmp above", 0, dir | 0o1777, false, ""},
		{"root's sticky as the state directory", 0, dir | 0o1777, true, "is a shared directory"},
		{"another user's sticky above", nobody, dir | 0o1777, false, "is owned by uid 65534"},
		{"root's link", 0, link | 0o777, false, ""},
		{"another user's link", nobody, link | 0o777, false, "a symbolic link owned by uid 65534"},
		{"a file", 0, file | 0o644, true, "is not a directory"},
	} {
		err := checkTrusted("/x", c.uid, c.mode, c.last)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: checkTrusted = %v, want %q", c.name, err, c.want)
		}
	}
}

// mkdir makes a directory with exactly mode, owned by uid.
func mkdir(t *testing.T, path string, mode os.FileMode, uid int) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	return path
}

// markedNode makes dir look like a node's state directory: the marker, a
// manifest naming run and etcd, a PID file and etcd's data.
func markedNode(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"run", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{markerFile: "", manifestFile: "state run\nstate etcd\n", "run/etcd.pid": "999999999 1\n", "etcd/data": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// refusedByUpAndDown checks that Up and Down both refuse dir, saying want,
// and that Down removed nothing.
func refusedByUpAndDown(t *testing.T, dir, want string) {
	t.Helper()
	data := filepath.Join(dir, "etcd", "data")
	_, err := os.Stat(data)
	had := err == nil
	if err := Down(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "refused: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("Down(%s) = %v, want a refusal saying %q", dir, err, want)
	}
	// Refused before Up looks for root, tools or binaries.
	cfg := Config{StateDir: dir, BinDir: filepath.Join(t.TempDir(), "none"), Kubelet: "/nonexistent"}
	if _, err := UpRuntime(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("UpRuntime(%s) = %v, want a refusal saying %q", dir, err, want)
	}
	if _, err := os.Stat(data); had && err != nil {
		t.Errorf("a refused state directory lost etcd's data: %v", err)
	}
}

// A state directory another user owns is refused: that user could forge a
// PID file for root to signal, or plant a link for root to write through.
func TestStateDirOwnedByAnotherUserIsRefused(t *testing.T) {
	dir := mkdir(t, filepath.Join(t.TempDir(), "theirs"), 0o755, nobody)
	markedNode(t, dir)
	refusedByUpAndDown(t, dir, dir+" is owned by uid 65534")

	// Also when only a parent is theirs: they can rename the state
	// directory away and put another in its place.
	parent := mkdir(t, filepath.Join(t.TempDir(), "home"), 0o755, nobody)
	inner := mkdir(t, filepath.Join(parent, "node"), 0o755, 0)
	markedNode(t, inner)
	refusedByUpAndDown(t, inner, parent+" is owned by uid 65534")
}

// A state directory below a directory that group or others can write is
// refused; a root-owned sticky directory above it (/tmp) is not, but is
// never the state directory itself.
func TestStateDirUnderWritableParentIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o775, 0o757} {
		parent := mkdir(t, filepath.Join(t.TempDir(), "shared"), mode, 0)
		dir := mkdir(t, filepath.Join(parent, "node"), 0o755, 0)
		markedNode(t, dir)
		refusedByUpAndDown(t, dir, "can be written by its group or by others")
	}

	sticky := mkdir(t, filepath.Join(t.TempDir(), "tmp"), 0o777|os.ModeSticky, 0)
	ok := mkdir(t, filepath.Join(sticky, "node"), 0o755, 0)
	if real, err := trustStateDir(ok); err != nil || real != ok {
		t.Errorf("a root-owned 0755 directory in a root-owned sticky one: %q, %v; want it accepted", real, err)
	}
	if _, err := trustStateDir(filepath.Join(sticky, "new", "node")); err != nil {
		t.Errorf("a new directory below a root-owned sticky one: %v; want it accepted (checked again once made)", err)
	}
	markedNode(t, sticky)
	refusedByUpAndDown(t, sticky, "is a shared directory")

	// A name another user took first in a sticky directory, as a directory
	// or as a link, is refused when the node would create it.
	taken := mkdir(t, filepath.Join(sticky, "taken"), 0o755, nobody)
	if r, err := createStateDir(filepath.Join(taken, "node")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		if r != nil {
			r.close()
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
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if r, err := createStateDir(filepath.Join(link, "node")); err == nil || !strings.Contains(err.Error(), "symbolic link owned by uid 65534") {
		if r != nil {
			r.close()
		}
		t.Errorf("createStateDir through another user's link: %v, want a refusal", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) > 0 {
		t.Errorf("a refused state directory was created where another user's link points: %v", entries)
	}
}

// Links on the way are followed only when root owns them, and the state
// directory is used by the path they resolve to.
func TestStateDirLinksMustBeRoots(t *testing.T) {
	tmp := t.TempDir()
	real := mkdir(t, filepath.Join(tmp, "real"), 0o755, 0)
	link := filepath.Join(tmp, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if got, err := trustStateDir(link); err != nil || got != real {
		t.Errorf("trustStateDir(root's link) = %q, %v; want %q", got, err, real)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	markedNode(t, real)
	refusedByUpAndDown(t, link, link+" is a symbolic link owned by uid 65534")
}

// The refusal says which path, which owner or mode, and what to do.
func TestRefusalMessage(t *testing.T) {
	dir := mkdir(t, filepath.Join(t.TempDir(), "cn"), 0o777, 0)
	_, err := trustStateDir(dir)
	if err == nil {
		t.Fatal("a 0777 state directory was accepted")
	}
	for _, want := range []string{"state directory " + dir + " refused", dir + " (mode 0777) can be written by its group or by others (chmod go-w " + shellQuote(dir) + ")", "STATE_DIR="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
}
