package stateguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The node runs as root and trusts what its state directory holds: PID
// files name the processes it signals, and it writes configuration, and
// removes whole trees, there. So, as openssh's StrictModes checks a user's
// files, a state directory is used only when nobody but root can change
// what its path names: every directory from / down to it is root's and
// closed to group and other writes, and every symbolic link on the way is
// root's too.
//
// One exception: a root-owned sticky directory such as /tmp (mode 1777)
// may lie on the way, though never be the state directory itself. In it
// others can add names but not rename or remove root's entries, so the
// root-owned directory below it stays what it is; and a name another user
// took first fails the check when the node finds it, before and after the
// node creates the directory. What the node then creates below the state
// directory it opens relative to the directory checked, never through a
// link (statefs.go).

// trustedOwner reports whether uid may own a directory on a state
// directory's path: root, or whoever runs the node (root, when it runs at
// all).
func trustedOwner(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// checkTrusted applies the rule to one existing entry on a state
// directory's path, given its owner and st_mode; last is the state
// directory itself. The errors say what is wrong and the command that
// fixes it; refusedStateDir adds why it matters.
func checkTrusted(path string, uid, mode uint32, last bool) error {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		if !trustedOwner(uid) {
			return fmt.Errorf("%s is a symbolic link owned by %s, who can point it anywhere (name the directory it leads to instead, or chown -h root %s)", path, describeUID(uid), shellQuote(path))
		}
		return nil
	case syscall.S_IFDIR:
	default:
		return fmt.Errorf("%s is not a directory", path)
	}
	if !trustedOwner(uid) {
		return fmt.Errorf("%s is owned by %s, not root (chown root %s)", path, describeUID(uid), shellQuote(path))
	}
	if mode&0o022 == 0 {
		return nil
	}
	sticky := mode&syscall.S_ISVTX != 0
	switch {
	case sticky && uid == 0 && !last:
		return nil
	case sticky && last:
		return fmt.Errorf("%s (mode %04o) is a shared directory: anyone can create entries in it (use a directory of its own below it, e.g. %s)", path, mode&0o7777, filepath.Join(path, "critlet-local-node"))
	}
	return fmt.Errorf("%s (mode %04o) can be written by its group or by others (chmod go-w %s)", path, mode&0o7777, shellQuote(path))
}

// describeUID names a user for messages: "uid 65534 (nobody)".
func describeUID(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return fmt.Sprintf("uid %s (%s)", id, u.Username)
	}
	return "uid " + id
}

// Trust checks the state directory's path by the rule above and returns it
// resolved: the directory itself, by a path without symbolic links. A
// missing tail is allowed, and kept as given: the node creates it (Claim),
// below a checked directory.
func Trust(dir string) (string, error) {
	real, err := resolveTrusted(dir)
	if err != nil {
		return "", refusedStateDir(dir, err)
	}
	return real, nil
}

// refusedStateDir explains a refusal and what to do about it.
func refusedStateDir(dir string, err error) error {
	return fmt.Errorf("state directory %s refused: %w. The node runs as root and acts on what the directory holds (PID files it signals, files it writes, trees it removes), "+
		"so the directory, every directory above it and every symbolic link on the way must be root's and writable by root alone; "+
		"a root-owned sticky directory such as /tmp may be among those above. Fix that, or choose another directory, e.g. STATE_DIR=/var/lib/critlet-local-node", dir, err)
}

// maxLinks bounds the symbolic links followed resolving one path, as the
// kernel's 40 does.
const maxLinks = 40

// resolveTrusted resolves dir component by component, as the kernel
// would, checking each entry met, links included, with checkTrusted.
func resolveTrusted(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%q is not an absolute path", dir)
	}
	todo := splitPath(filepath.Clean(dir))
	if err := lstatTrusted("/", len(todo) == 0); err != nil {
		return "", err
	}
	cur, links := "/", 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == ".." { // only from a link's target
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if err != nil {
			return "", err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if err := checkTrusted(next, st.Uid, st.Mode, len(todo) == 0); err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: %w", dir, syscall.ELOOP)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(splitPath(target), todo...)
	}
	return cur, nil
}

func lstatTrusted(path string, last bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return checkTrusted(path, st.Uid, st.Mode, last)
}

// splitPath returns a path's components, without empty ones or ".".
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// shellQuote quotes s for a POSIX shell, for the commands the refusals
// suggest. The node has its own for its scripts: three lines are not worth
// a package both would import.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
