package stateguard

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// systemDirs are directories a node's state may never be: Down removes
// fixed names (run, pki, images, …) from the state directory.
var systemDirs = []string{
	"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
	"/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share",
	"/var", "/var/lib", "/var/log", "/var/run", "/var/tmp",
}

// Check refuses a state directory that a node must not claim: a system
// directory, a user's home directory (either also through symlinks), or an
// existing directory that holds anything while no node created it. A
// directory a node created keeps its marker after Down, with the logs.
func Check(dir string) error {
	if err := refuseSystemDir(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	// Logs alone are what Down left before it kept the marker.
	if len(entries) == 0 || len(entries) == 1 && entries[0].Name() == "logs" && entries[0].IsDir() {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dir, MarkerFile)); err != nil {
		return fmt.Errorf("state directory %s holds %d entries and no local node created it (no %s): choose a new or empty directory", dir, len(entries), MarkerFile)
	}
	return nil
}

// refuseSystemDir refuses a system or home directory, also reached
// through symlinks: whoever removes fixed names from it would remove the
// system's.
func refuseSystemDir(dir string) error {
	paths := []string{filepath.Clean(dir)}
	if resolved, err := filepath.EvalSymlinks(dir); err == nil && resolved != paths[0] {
		paths = append(paths, resolved)
	}
	homes := homeDirs()
	for _, p := range paths {
		if slices.Contains(homes, p) || slices.Contains(systemDirs, p) {
			return fmt.Errorf("state directory %s is a system or home directory: choose a directory of its own, e.g. %s", dir, filepath.Join(p, "critlet-local-node"))
		}
	}
	return nil
}

// homeDirs lists the home directories of /etc/passwd and $HOME.
func homeDirs() []string {
	var out []string
	if h := os.Getenv("HOME"); h != "" {
		out = append(out, filepath.Clean(h))
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 6 && filepath.IsAbs(fields[5]) {
			out = append(out, filepath.Clean(fields[5]))
		}
	}
	return out
}
