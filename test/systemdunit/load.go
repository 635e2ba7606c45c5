package systemdunit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// SearchPath is where the system manager looks for units, highest priority
// first (systemd.unit(5), with the /lib path of split-/usr systems last).
var SearchPath = []string{
	"/etc/systemd/system",
	"/run/systemd/system",
	"/usr/local/lib/systemd/system",
	"/usr/lib/systemd/system",
	"/lib/systemd/system",
}

// Option is one assignment of a unit file, with the file it came from.
type Option struct {
	Section, Name, Value string
	File                 string // path under the root, for messages
}

// Load returns the assignments of unit name under root, as systemd merges
// them: the unit file first on SearchPath, then every drop-in
// (<dir>/<name>.d/*.conf) in file-name order, where a drop-in name found in
// several directories is taken from the highest-priority one.
func Load(root, name string) ([]Option, error) {
	dirs, err := searchDirs(root)
	if err != nil {
		return nil, err
	}
	var unitFile string
	for _, d := range dirs {
		p := filepath.Join(root, d, name)
		if _, err := os.Lstat(p); err == nil {
			unitFile = p
			break
		}
	}
	if unitFile == "" {
		return nil, fmt.Errorf("unit %s: not found under %s in %s", name, root, strings.Join(SearchPath, ", "))
	}
	if target, err := os.Readlink(unitFile); err == nil && target == "/dev/null" {
		return nil, fmt.Errorf("unit %s is masked (%s links to /dev/null)", name, unitFile)
	}
	opts, err := parseFile(root, unitFile)
	if err != nil {
		return nil, err
	}

	dropIns := map[string]string{} // base name → path, first directory wins
	for _, d := range dirs {
		dir := filepath.Join(root, d, name+".d")
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("unit %s: reading drop-ins: %w", name, err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".conf") {
				continue
			}
			if _, ok := dropIns[e.Name()]; !ok {
				dropIns[e.Name()] = filepath.Join(dir, e.Name())
			}
		}
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		more, err := parseFile(root, dropIns[n])
		if err != nil {
			return nil, err
		}
		opts = append(opts, more...)
	}
	return opts, nil
}

// searchDirs is SearchPath without directories that are the same directory
// under root as an earlier one (/lib linking to /usr/lib).
func searchDirs(root string) ([]string, error) {
	var dirs []string
	seen := map[string]bool{}
	for _, d := range SearchPath {
		real, err := filepath.EvalSymlinks(filepath.Join(root, d))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("unit search path %s: %w", d, err)
		}
		if !seen[real] {
			seen[real] = true
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

func parseFile(root, path string) ([]Option, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading unit file: %w", err)
	}
	defer f.Close()
	rel, _ := filepath.Rel(root, path)
	raw, err := unit.DeserializeOptions(f)
	if err != nil {
		return nil, fmt.Errorf("parsing /%s: %w", rel, err)
	}
	opts := make([]Option, len(raw))
	for i, o := range raw {
		opts[i] = Option{Section: o.Section, Name: o.Name, Value: o.Value, File: "/" + rel}
	}
	return opts, nil
}
