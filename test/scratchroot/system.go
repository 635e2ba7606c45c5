package scratchroot

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The userland a system root gets from the host's static busybox: a shell
// and the POSIX tools maintainer scripts use.
var busyboxApplets = []string{
	"sh", "ash", "[", "test", "echo", "printf", "true", "false", "env", "sleep",
	"cat", "cp", "mv", "rm", "rmdir", "mkdir", "ln", "ls", "touch", "chmod", "chown", "stat",
	"readlink", "realpath", "basename", "dirname", "mktemp", "date", "id", "expr",
	"grep", "egrep", "fgrep", "sed", "awk", "sort", "uniq", "head", "tail", "cut", "tr", "wc",
	"tee", "xargs", "find", "md5sum", "sha256sum",
}

// The merged-/usr aliases of a Debian 12 or RHEL 9 system.
var mergedUsr = map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib"}

// hostBusybox is the static busybox the system roots run their scripts with.
const hostBusybox = "/bin/busybox"

// CanChroot says why this process cannot make system roots, or nil: they
// need root (chroot) and the host's static busybox (Debian's
// busybox-static).
func CanChroot() error {
	if os.Geteuid() != 0 {
		return errors.New("scripts run chrooted into the scratch root: that needs root")
	}
	return checkStatic(hostBusybox)
}

// checkStatic fails unless path is a statically linked executable: the root
// has no C library for it.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (install Debian's busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: install Debian's busybox-static", path)
		}
	}
	return nil
}

// makeSystem lays out dir as a merged-/usr system with busybox's userland,
// for package scripts to run chrooted in.
func makeSystem(dir string) error {
	if err := CanChroot(); err != nil {
		return err
	}
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "etc", "tmp", "var/tmp", "run", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
	}
	// Scripts send output to /dev/null: the character device 1:3.
	if err := os.MkdirAll(filepath.Join(dir, "dev"), 0o755); err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "dev/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		return fmt.Errorf("scratch root: making /dev/null: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "dev/null"), 0o666); err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	for alias, target := range mergedUsr {
		if err := os.Symlink(target, filepath.Join(dir, alias)); err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
	}
	if err := copyFile(hostBusybox, filepath.Join(dir, "usr/bin/busybox"), 0o755); err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(dir, "usr/bin", a)); err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
	}
	return nil
}

// copyFromHost copies a host executable and the shared libraries ldd lists
// for it into the root, at the same paths (symbolic links on the way
// recreated as they are on the host).
func copyFromHost(root, program string) error {
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", program, err)
	}
	paths := []string{program}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)"; linux-vdso has no file.
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && filepath.IsAbs(f[2]):
			paths = append(paths, f[2])
		case len(f) >= 1 && filepath.IsAbs(f[0]):
			paths = append(paths, f[0])
		}
	}
	for _, p := range paths {
		if err := copyPath(root, p); err != nil {
			return fmt.Errorf("copying %s for %s into the scratch root: %w", p, program, err)
		}
	}
	return nil
}

// copyPath recreates the host path p under root: each symbolic link on the
// way as a link (followed on the host), the file itself as a copy.
func copyPath(root, p string) error {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, next)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					return err
				}
				if err := os.Symlink(target, dst); err != nil {
					return err
				}
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return copyPath(root, filepath.Join(append([]string{target}, parts[i+1:]...)...))
		case i == len(parts)-1:
			if _, err := os.Lstat(dst); err == nil {
				return nil
			}
			return copyFile(next, dst, fi.Mode().Perm())
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory", next)
		}
		cur = next
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CopyHostPackage copies into the root dir every file the host's installed
// Debian package pkg has (as dpkg-query lists them, outside the root's
// package database), with the shared libraries its ELF programs need: a
// system root gets a host tool and its interpreter so (Debian's
// deb-systemd-invoke is a Perl script: init-system-helpers and perl-base).
func CopyHostPackage(dir, pkg string) error {
	out, err := exec.Command("dpkg-query", "--listfiles", pkg).Output()
	if err != nil {
		return fmt.Errorf("scratch root: dpkg-query --listfiles %s: %w", pkg, err)
	}
	for _, p := range strings.Split(string(out), "\n") {
		// Diversion notes are not paths.
		if !strings.HasPrefix(p, "/") {
			continue
		}
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // listed, and removed by the host's administrator
		}
		if err != nil {
			return fmt.Errorf("scratch root: %w", err)
		}
		if fi.IsDir() {
			continue // made as the files in it are copied
		}
		if isDynamicELF(p) {
			err = copyFromHost(dir, p)
		} else {
			err = copyPath(dir, p)
		}
		if err != nil {
			return fmt.Errorf("scratch root: copying %s of the host's %s: %w", p, pkg, err)
		}
	}
	return nil
}

// isDynamicELF says whether path is an executable that the dynamic linker
// starts.
func isDynamicELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
