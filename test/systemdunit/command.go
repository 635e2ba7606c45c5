package systemdunit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Command is how systemd would start a service.
type Command struct {
	// Path is the executable, as the unit names it (absolute, not under
	// the root).
	Path string
	// Argv is the argument vector, argv[0] first.
	Argv []string
	// Env is what the unit adds to the service's environment, NAME=value,
	// sorted by name.
	Env []string
	// EnvironmentFiles are the files that were read, in order; optional
	// ones that do not exist are left out.
	EnvironmentFiles []string
}

// Resolve returns the command systemd would run for service name, whose
// unit files (and the environment files they name) live under root. Only
// the [Service] section's Environment=, EnvironmentFile= and ExecStart= are
// read; Type= must be simple (the default) or exec or notify, with exactly
// one ExecStart= left after resets.
func Resolve(root, name string) (Command, error) {
	opts, err := Load(root, name)
	if err != nil {
		return Command{}, err
	}
	var assignments []string // Environment= words, NAME=value
	var envFiles []string
	var exec []string
	for _, o := range opts {
		if o.Section != "Service" {
			continue
		}
		where := fmt.Sprintf("%s: %s=", o.File, o.Name)
		v, err := specifiers(o.Value, where)
		if err != nil {
			return Command{}, err
		}
		switch o.Name {
		case "Type":
			if !slices.Contains([]string{"simple", "exec", "notify"}, v) {
				return Command{}, fmt.Errorf("%s%s: only services with one main process are supported", where, v)
			}
		case "Environment":
			if strings.TrimSpace(v) == "" {
				assignments = nil
				continue
			}
			words, err := splitWords(v, true)
			if err != nil {
				return Command{}, fmt.Errorf("%s %w", where, err)
			}
			for _, w := range words {
				n, _, ok := strings.Cut(w, "=")
				if !ok || !envNameRE.MatchString(n) {
					return Command{}, fmt.Errorf("%s %q is not NAME=value", where, w)
				}
			}
			assignments = append(assignments, words...)
		case "EnvironmentFile":
			if strings.TrimSpace(v) == "" {
				envFiles = nil
				continue
			}
			envFiles = append(envFiles, strings.TrimSpace(v))
		case "ExecStart":
			if strings.TrimSpace(v) == "" {
				exec = nil
				continue
			}
			exec = append(exec, v)
		}
	}
	switch len(exec) {
	case 0:
		return Command{}, fmt.Errorf("unit %s has no ExecStart=", name)
	case 1:
	default:
		return Command{}, fmt.Errorf("unit %s has %d ExecStart= lines; a simple service takes one (reset it with an empty ExecStart= first)", name, len(exec))
	}

	env := map[string]string{}
	for _, a := range assignments {
		n, v, _ := strings.Cut(a, "=")
		env[n] = v
	}
	var read []string
	for _, f := range envFiles {
		path, optional := strings.CutPrefix(f, "-")
		if !filepath.IsAbs(path) {
			return Command{}, fmt.Errorf("EnvironmentFile=%s: not an absolute path", f)
		}
		data, err := os.ReadFile(filepath.Join(root, path))
		if optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Command{}, fmt.Errorf("EnvironmentFile=%s: %w", f, err)
		}
		pairs, err := ParseEnvironmentFile(string(data))
		if err != nil {
			return Command{}, fmt.Errorf("EnvironmentFile=%s: %w", f, err)
		}
		for _, p := range pairs {
			env[p.Name] = p.Value
		}
		read = append(read, path)
	}

	cmd, err := execCommand(exec[0], env)
	if err != nil {
		return Command{}, fmt.Errorf("unit %s: ExecStart=%s: %w", name, exec[0], err)
	}
	for n, v := range env {
		cmd.Env = append(cmd.Env, n+"="+v)
	}
	slices.Sort(cmd.Env)
	cmd.EnvironmentFiles = read
	return cmd, nil
}

// execCommand parses one ExecStart= value: its prefixes, its words, and
// their expansion.
func execCommand(v string, env map[string]string) (Command, error) {
	words, err := splitWords(v, true)
	if err != nil {
		return Command{}, err
	}
	if len(words) == 0 {
		return Command{}, fmt.Errorf("no command")
	}
	path := words[0]
	var separateArgv0, noExpand bool
	for path != "" && strings.IndexByte("-@:+!", path[0]) >= 0 {
		switch path[0] {
		case '@':
			separateArgv0 = true
		case ':':
			noExpand = true
		}
		path = path[1:]
	}
	if !filepath.IsAbs(path) {
		return Command{}, fmt.Errorf("%q is not an absolute path", path)
	}
	argv := append([]string{path}, words[1:]...)
	if separateArgv0 {
		if len(words) < 2 {
			return Command{}, fmt.Errorf("'@' needs argv[0] after the path")
		}
		argv = words[1:]
	}
	if !noExpand {
		rest, err := expandWords(argv[1:], env)
		if err != nil {
			return Command{}, err
		}
		argv = append(argv[:1:1], rest...)
	}
	return Command{Path: path, Argv: argv}, nil
}
