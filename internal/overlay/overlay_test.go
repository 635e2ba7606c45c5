package overlay

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/patched"
)

// tree writes files (slash paths relative to the returned root) to a new
// temporary directory; a file's content is "package x\n" unless given after
// a "=" in its name.
func tree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		name, content, ok := strings.Cut(f, "=")
		if !ok {
			content = "package x\n"
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const addedSrc = "//go:build critlet_patch\n\npackage x\n"

const hookedSrc = `package x

func (k *K) Add() {
	for range 2 {
		reject()
	}
}

func other() {
	reject()
}
`

func replacing(pkg string) patched.Patch {
	return patched.Patch{Name: "swap-" + strings.ReplaceAll(pkg, "/", "-"), Change: "c", Issues: []string{"i"}, Package: pkg, Replaces: true,
		Proof: []patched.Reach{{From: "f", To: "t"}}}
}

func extending(pkg string, hooks ...patched.Hook) patched.Patch {
	return patched.Patch{Name: "ext", Change: "c", Issues: []string{"i"}, Package: pkg, Setting: "s", SettingHelp: "h", Hooks: hooks,
		Proof: []patched.Reach{{From: "f", To: "t"}}}
}

var addHook = patched.Hook{File: "p/k.go", Func: "(*K).Add", Line: "reject()", Call: "critletRefused()"}

func TestBuild(t *testing.T) {
	tests := []struct {
		name     string
		upstream []string
		repo     []string
		patches  []patched.Patch
		// want maps upstream-relative keys to repo-relative values, "" for
		// a deletion and "gen:" for a generated file.
		want    map[string]string
		wantErr string
	}{
		{
			name:     "replaces, adds and deletes; leaves tests, other files, subpackages and other packages alone",
			upstream: []string{"p/a.go", "p/b.go", "p/a_test.go", "p/OWNERS", "p/sub/s.go", "q/q.go"},
			repo:     []string{"p/a.go", "p/new.go", "p/new_test.go"},
			patches:  []patched.Patch{replacing("p")},
			want: map[string]string{
				"p/a.go":                           "p/a.go",
				"p/b.go":                           "",
				"p/new.go":                         "p/new.go",
				"p/critlet_zz_generated_swap_p.go": "gen:",
			},
		},
		{
			name:     "several packages, nested, ignored file names",
			upstream: []string{"pkg/x/x.go", "pkg/x/y/y.go", "pkg/x/y/y_linux.go", "pkg/x/_skip.go", "pkg/x/.hidden.go"},
			repo:     []string{"pkg/x/x1.go", "pkg/x/y/z.go", "pkg/x/_draft.go"},
			patches:  []patched.Patch{replacing("pkg/x"), replacing("pkg/x/y")},
			want: map[string]string{
				"pkg/x/x.go":         "",
				"pkg/x/x1.go":        "pkg/x/x1.go",
				"pkg/x/y/y.go":       "",
				"pkg/x/y/y_linux.go": "",
				"pkg/x/y/z.go":       "pkg/x/y/z.go",
				"pkg/x/critlet_zz_generated_swap_pkg_x.go":     "gen:",
				"pkg/x/y/critlet_zz_generated_swap_pkg_x_y.go": "gen:",
			},
		},
		{
			name:     "extends: adds critlet files, hooks one file, leaves the rest",
			upstream: []string{"p/k.go=" + hookedSrc, "p/other.go", "p/k_test.go"},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc, "p/critlet_ext_retry_test.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			want: map[string]string{
				"p/critlet_ext_retry.go":        "p/critlet_ext_retry.go",
				"p/critlet_ext_retry_test.go":   "p/critlet_ext_retry_test.go",
				"p/k.go":                        "gen:",
				"p/critlet_zz_generated_ext.go": "gen:",
			},
		},
		{
			name:     "two extensions of one package: each adds its own files and hooks its own file",
			upstream: []string{"p/k.go=" + hookedSrc, "p/j.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc, "p/critlet_more.go=" + addedSrc},
			patches: []patched.Patch{extending("p", addHook), func() patched.Patch {
				m := extending("p", patched.Hook{File: "p/j.go", Func: "(*K).Add", Line: "reject()", Call: "critletMore()"})
				m.Name = "more"
				return m
			}()},
			want: map[string]string{
				"p/critlet_ext_retry.go":         "p/critlet_ext_retry.go",
				"p/critlet_more.go":              "p/critlet_more.go",
				"p/k.go":                         "gen:",
				"p/j.go":                         "gen:",
				"p/critlet_zz_generated_ext.go":  "gen:",
				"p/critlet_zz_generated_more.go": "gen:",
			},
		},
		{
			name:     "hooks where upstream wires the patch: the hooked package gets the patch's registrar",
			upstream: []string{"p/k.go=" + hookedSrc, "q/k.go=" + hookedSrc, "q/other.go"},
			repo:     []string{"p/critlet_ext.go=" + addedSrc},
			patches: []patched.Patch{extending("p", addHook,
				patched.Hook{File: "q/k.go", Func: "other", Line: "reject()", Call: "x.CritletWrap()"})},
			want: map[string]string{
				"p/critlet_ext.go":                    "p/critlet_ext.go",
				"p/k.go":                              "gen:",
				"p/critlet_zz_generated_ext.go":       "gen:",
				"q/k.go":                              "gen:",
				"q/critlet_zz_generated_ext_hooks.go": "gen:",
			},
		},
		{
			name:     "a hook into a package that is not there",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext.go=" + addedSrc},
			patches: []patched.Patch{extending("p", addHook,
				patched.Hook{File: "q/k.go", Func: "other", Line: "reject()", Call: "x.CritletWrap()"})},
			wantErr: "patch ext: hooked file q/k.go",
		},
		{
			name:     "a file no patch of the package owns",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc, "p/critlet_stray.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "critlet_stray.go: no patch of p owns this file",
		},
		{
			name:     "a test file no patch of the package owns",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc, "p/k_test.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "k_test.go: no patch of p owns this test file",
		},
		{
			name:     "a patch's test file without the build tag",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc, "p/critlet_ext_test.go"},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "must start with \"//go:build critlet_patch\"",
		},
		{
			name:     "an added file must be named critlet_*",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/retry.go"},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "patch ext: ",
		},
		{
			name:     "an added file without the build tag",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go"},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "must start with \"//go:build critlet_patch\"",
		},
		{
			name:     "an added file with another build tag",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_ext_retry.go=//go:build linux\n\npackage x\n"},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "want \"//go:build critlet_patch\"",
		},
		{
			name:     "an added file may not replace upstream's",
			upstream: []string{"p/k.go=" + hookedSrc, "p/critlet_ext.go"},
			repo:     []string{"p/critlet_ext.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "an added file may not replace one",
		},
		{
			name:     "the generated name is the build's",
			upstream: []string{"p/k.go=" + hookedSrc},
			repo:     []string{"p/critlet_zz_generated_ext.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "no patch of p owns",
		},
		{
			name:     "hook line gone upstream names the patch and the file",
			upstream: []string{"p/k.go=package x\n\nfunc (k *K) Add() {\n\trefuse()\n}\n"},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  `patch ext: hook in p/k.go, (*K).Add, on line "reject()": the line occurs 0 times`,
		},
		{
			name:     "hooked file gone upstream",
			upstream: []string{"p/other.go"},
			repo:     []string{"p/critlet_ext_retry.go=" + addedSrc},
			patches:  []patched.Patch{extending("p", addHook)},
			wantErr:  "patch ext: hooked file p/k.go",
		},
		{
			name:     "declared package missing upstream",
			upstream: []string{"other/o.go"},
			repo:     []string{"p/a.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "upstream package",
		},
		{
			name:     "declared package missing in the repository",
			upstream: []string{"p/a.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "replacement package",
		},
		{
			name:     "a package under the root that no patch declares",
			upstream: []string{"p/a.go", "q/q.go"},
			repo:     []string{"p/a.go", "q/q.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "no patch declares package q",
		},
		{
			name:     "an ordinary package nested in a replaced one",
			upstream: []string{"p/a.go"},
			repo:     []string{"p/a.go", "p/victims/v.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "no patch declares package p/victims",
		},
		{
			name:     "upstream package has only tests",
			upstream: []string{"p/a_test.go"},
			repo:     []string{"p/a.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "no non-test Go files",
		},
		{
			name:     "replacement has only tests",
			upstream: []string{"p/a.go"},
			repo:     []string{"p/a_test.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "no non-test Go files",
		},
		{
			name:     "assembly cannot be replaced by Go files",
			upstream: []string{"p/a.go", "p/a_amd64.s"},
			repo:     []string{"p/a.go"},
			patches:  []patched.Patch{replacing("p")},
			wantErr:  "non-Go source",
		},
		{name: "nothing declared", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, wantErr: "no patches"},
		{name: "invalid declaration", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, patches: []patched.Patch{replacing("../p")}, wantErr: "clean, slash-separated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, repo, gen := tree(t, tc.upstream...), tree(t, tc.repo...), t.TempDir()
			got, err := Build(up, repo, gen, tc.patches)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Build error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			want := map[string]string{}
			for k, v := range tc.want {
				switch {
				case v == "gen:":
					v = filepath.Join(gen, filepath.FromSlash(k))
				case v != "":
					v = filepath.Join(repo, filepath.FromSlash(v))
				}
				want[filepath.Join(up, filepath.FromSlash(k))] = v
			}
			if len(got.Overlay.Replace) != len(want) {
				t.Errorf("got %d entries, want %d:\n got %v\nwant %v", len(got.Overlay.Replace), len(want), got.Overlay.Replace, want)
			}
			for k, v := range want {
				if g, ok := got.Overlay.Replace[k]; !ok || g != v {
					t.Errorf("Replace[%s] = %q (present %v), want %q", k, g, ok, v)
				}
			}
			for _, v := range got.Overlay.Replace {
				if strings.HasPrefix(v, gen) && got.Generated[v] == nil {
					t.Errorf("overlay points at %s, which the plan does not generate", v)
				}
			}
			if len(entries(t, gen)) != 0 {
				t.Errorf("planning wrote files: %v", entries(t, gen))
			}
			checkTouchesExactly(t, got, up, repo, tc.patches)
		})
	}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestApplyHooks(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		hooks   []patched.Hook
		want    string
		wantErr string
	}{
		{
			name:  "appends to the one line in the function",
			src:   hookedSrc,
			hooks: []patched.Hook{{File: "k.go", Func: "(*K).Add", Line: "reject()", Call: "critlet()"}},
			want:  strings.Replace(hookedSrc, "\t\treject()\n", "\t\treject(); critlet()\n", 1),
		},
		{
			name:  "plain function",
			src:   hookedSrc,
			hooks: []patched.Hook{{File: "k.go", Func: "other", Line: "reject()", Call: "critlet()"}},
			want:  strings.Replace(hookedSrc, "\treject()\n}\n", "\treject(); critlet()\n}\n", 1),
		},
		{
			name:    "line twice in the function",
			src:     "package x\n\nfunc f() {\n\tg()\n\tg()\n}\n",
			hooks:   []patched.Hook{{File: "k.go", Func: "f", Line: "g()", Call: "c()"}},
			wantErr: "occurs 2 times",
		},
		{
			name:    "no such function",
			src:     hookedSrc,
			hooks:   []patched.Hook{{File: "k.go", Func: "K.Add", Line: "reject()", Call: "c()"}},
			wantErr: "no function K.Add",
		},
		{
			name:    "a commented line",
			src:     "package x\n\nfunc f() {\n\tg() // why\n}\n",
			hooks:   []patched.Hook{{File: "k.go", Func: "f", Line: "g() // why", Call: "c()"}},
			wantErr: "may not hold a comment",
		},
		{
			name:    "a call that breaks the file",
			src:     hookedSrc,
			hooks:   []patched.Hook{{File: "k.go", Func: "other", Line: "reject()", Call: "critlet("}},
			wantErr: "no longer parses",
		},
		{
			name: "the same line hooked twice",
			src:  hookedSrc,
			hooks: []patched.Hook{
				{File: "k.go", Func: "other", Line: "reject()", Call: "a()"},
				{File: "k.go", Func: "other", Line: "reject()", Call: "b()"},
			},
			wantErr: "hooked twice",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ApplyHooks("k.go", []byte(tc.src), tc.hooks)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestApplyWritesPlanAndRemovesStaleFiles(t *testing.T) {
	up := tree(t, "p/k.go="+hookedSrc)
	repo := tree(t, "p/critlet_ext_retry.go="+addedSrc)
	gen := filepath.Join(t.TempDir(), "gen")
	stale := filepath.Join(gen, "p", "old.go")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := Build(up, repo, gen, []patched.Patch{extending("p", addHook)})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "overlay.json")
	if err := plan.Apply(gen, out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale generated file survived: %v", err)
	}
	for p, want := range plan.Generated {
		if got, err := os.ReadFile(p); err != nil || string(got) != string(want) {
			t.Errorf("%s: %v, content differs", p, err)
		}
	}
	var f File
	data, _ := os.ReadFile(out)
	if err := json.Unmarshal(data, &f); err != nil || len(f.Replace) != len(plan.Overlay.Replace) {
		t.Fatalf("overlay file %s: %v", data, err)
	}
	// A plan may only write under its generation directory.
	plan.Generated["/etc/critlet-overlay-test"] = []byte("x")
	if err := plan.Apply(gen, out); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("writing outside the generation directory: %v", err)
	}
}

func TestJSONIsStableAndWhatGoReads(t *testing.T) {
	f := &File{Replace: map[string]string{"/u/p/b.go": "", "/u/p/a.go": "/r/p/a.go"}}
	first, err := f.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := f.JSON()
		if string(again) != string(first) {
			t.Fatalf("JSON not deterministic:\n%s\n%s", first, again)
		}
	}
	var decoded struct{ Replace map[string]string }
	if err := json.Unmarshal(first, &decoded); err != nil {
		t.Fatalf("decoding %s: %v", first, err)
	}
	if len(decoded.Replace) != 2 || decoded.Replace["/u/p/a.go"] != "/r/p/a.go" {
		t.Fatalf("decoded %v", decoded.Replace)
	}
}

// TestRealOverlayTouchesOnlyDeclaredPackages plans the overlay the build
// uses, from patched.Patches, this repository and the pinned upstream
// module, and checks it against a listing made independently of Build; each
// hooked file differs from upstream's only on its hooked lines.
func TestRealOverlayTouchesOnlyDeclaredPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating k8s.io/kubernetes (run 'go mod download' first): %v", err)
	}
	up := strings.TrimSpace(string(out))
	if up == "" {
		t.Fatal("k8s.io/kubernetes is not in the module cache; run 'go mod download'")
	}
	repo, err := filepath.Abs(filepath.Join("../..", SourceRoot))
	if err != nil {
		t.Fatal(err)
	}
	gen := t.TempDir()
	plan, err := Build(up, repo, gen, patched.Patches)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkTouchesExactly(t, plan, up, repo, patched.Patches)
	hooks := 0
	for _, p := range patched.Patches {
		for _, h := range p.Hooks {
			hooks++
			orig, err := os.ReadFile(filepath.Join(up, filepath.FromSlash(h.File)))
			if err != nil {
				t.Fatal(err)
			}
			hooked := plan.Generated[filepath.Join(gen, filepath.FromSlash(h.File))]
			a, b := strings.Split(strings.TrimSuffix(string(orig), "\n"), "\n"), strings.Split(strings.TrimSuffix(string(hooked), "\n"), "\n")
			// After upstream's lines, one registering init per patch hooking
			// the file.
			inits := patchesHooking(patched.Patches, h.File)
			if len(b) != len(a)+inits {
				t.Fatalf("%s: %d lines hooked, %d upstream: want upstream's and %d inits", h.File, len(b), len(a), inits)
			}
			for _, l := range b[len(a):] {
				if !strings.HasPrefix(l, "func init() { critletHooked_") {
					t.Fatalf("%s: line %q after upstream's, want a registering init", h.File, l)
				}
			}
			b = b[:len(a)]
			changed := 0
			for i := range a {
				if a[i] == b[i] {
					continue
				}
				changed++
				if !strings.HasPrefix(b[i], a[i]+"; ") {
					t.Errorf("%s:%d: %q is not upstream's %q plus a call", h.File, i+1, b[i], a[i])
				}
			}
			if want := countHooks(patched.Patches, h.File); changed != want {
				t.Errorf("%s: %d lines changed, %d hooks declared", h.File, changed, want)
			}
		}
	}
	if hooks == 0 {
		t.Fatal("no hooks declared: the check above checked nothing")
	}
}

func patchesHooking(patches []patched.Patch, file string) int {
	n := 0
	for _, p := range patches {
		if slices.ContainsFunc(p.Hooks, func(h patched.Hook) bool { return h.File == file }) {
			n++
		}
	}
	return n
}

func countHooks(patches []patched.Patch, file string) int {
	n := 0
	for _, p := range patches {
		for _, h := range p.Hooks {
			if h.File == file {
				n++
			}
		}
	}
	return n
}

// checkTouchesExactly asserts that every overlay key lies directly in a
// declared package directory of the upstream copy; that a replaced package
// loses every upstream non-test Go file and gains every one of the
// project's under its own name; that an extended package keeps upstream's
// files but the hooked ones and gains the project's critlet_* files; and
// that each patch has its generated registration.
func checkTouchesExactly(t *testing.T, plan *Plan, up, repo string, patches []patched.Patch) {
	t.Helper()
	byDir := map[string][]patched.Patch{}
	for _, p := range patches {
		dir := filepath.Join(up, filepath.FromSlash(p.Package))
		byDir[dir] = append(byDir[dir], p)
	}
	hooked := map[string]bool{}
	for _, p := range patches {
		for _, h := range p.Hooks {
			hooked[filepath.Join(up, filepath.FromSlash(h.File))] = true
		}
	}
	registration := map[string]bool{}
	// foreign[dir][base]: what a patch hooking dir but declared elsewhere
	// may have there: its hooked files and its registrar.
	foreign := map[string]map[string]bool{}
	for _, p := range patches {
		registration[registrationFile(p)] = true
		for _, pkg := range p.HookedPackages() {
			dir := filepath.Join(up, filepath.FromSlash(pkg))
			if foreign[dir] == nil {
				foreign[dir] = map[string]bool{}
			}
			foreign[dir][hookRegistrationFile(p)] = true
			for _, h := range p.Hooks {
				if filepath.Join(up, filepath.FromSlash(h.File)) == filepath.Join(dir, filepath.Base(h.File)) {
					foreign[dir][filepath.Base(h.File)] = true
				}
			}
		}
	}
	for k, v := range plan.Overlay.Replace {
		if allowed := foreign[filepath.Dir(k)]; allowed[filepath.Base(k)] {
			if plan.Generated[v] == nil {
				t.Errorf("overlay maps %s, a hooked file or registrar, to %s, not a generated file", k, v)
			}
			continue
		}
		ps, ok := byDir[filepath.Dir(k)]
		if !ok {
			t.Errorf("overlay key %s is outside the declared packages", k)
			continue
		}
		p := ps[0] // a replaced package has one patch (patched.Validate)
		base := filepath.Base(k)
		if filepath.Ext(k) != ".go" || strings.HasSuffix(k, "_test.go") && (p.Replaces || v == "") {
			t.Errorf("overlay key %s is not a Go file, or a test file a patch adds", k)
		}
		repoFile := filepath.Join(repo, filepath.FromSlash(p.Package), base)
		owned := slices.ContainsFunc(ps, func(p patched.Patch) bool { return p.Owns(base) })
		switch {
		case v == "" && p.Replaces:
		case v == "":
			t.Errorf("overlay deletes %s from extended package %s", k, p.Package)
		case plan.Generated[v] != nil:
			if !hooked[k] && !registration[base] {
				t.Errorf("overlay generates %s, neither hooked nor a registration", k)
			}
		case v != repoFile:
			t.Errorf("overlay maps %s to %s, want the project's file of the same name", k, v)
		case !p.Replaces && !owned:
			t.Errorf("overlay adds %s to extended package %s, a file no patch of it owns", base, p.Package)
		}
	}
	nonTestGo := func(dir string) []string {
		all, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var keep []string
		for _, p := range all {
			b := filepath.Base(p)
			if !strings.HasSuffix(b, "_test.go") && !strings.HasPrefix(b, "_") && !strings.HasPrefix(b, ".") {
				keep = append(keep, b)
			}
		}
		return keep
	}
	for upDir, ps := range byDir {
		p := ps[0]
		repoDir := filepath.Join(repo, filepath.FromSlash(p.Package))
		ups, ours := nonTestGo(upDir), nonTestGo(repoDir)
		if len(ups) == 0 || len(ours) == 0 {
			t.Errorf("declared package %s: %d upstream and %d project files; want both non-empty", upDir, len(ups), len(ours))
		}
		for _, b := range ups {
			_, touched := plan.Overlay.Replace[filepath.Join(upDir, b)]
			if p.Replaces && !touched {
				t.Errorf("upstream file %s survives the replacement", filepath.Join(upDir, b))
			}
			if !p.Replaces && touched != hooked[filepath.Join(upDir, b)] {
				t.Errorf("upstream file %s of extended package: touched %v, hooked %v", filepath.Join(upDir, b), touched, hooked[filepath.Join(upDir, b)])
			}
		}
		for _, b := range ours {
			if got := plan.Overlay.Replace[filepath.Join(upDir, b)]; got != filepath.Join(repoDir, b) {
				t.Errorf("project file %s is not added (overlay has %q)", filepath.Join(repoDir, b), got)
			}
		}
		for _, p := range ps {
			if _, ok := plan.Overlay.Replace[filepath.Join(upDir, registrationFile(p))]; !ok {
				t.Errorf("patch %s has no registration file", p.Name)
			}
		}
	}
}

// Two patches of one package may hook the same file on different lines:
// the file is hooked once, with both calls and one registering init per
// patch; the same line hooked by both stops the build naming a patch.
func TestTwoPatchesHookOneFile(t *testing.T) {
	src := "package x\n\nfunc (k *K) Add() {\n\tfirst()\n\tsecond()\n}\n"
	up := tree(t, "p/k.go="+src)
	repo := tree(t, "p/critlet_ext.go="+addedSrc, "p/critlet_more.go="+addedSrc)
	ext := extending("p", patched.Hook{File: "p/k.go", Func: "(*K).Add", Line: "first()", Call: "critletExt()"})
	more := extending("p", patched.Hook{File: "p/k.go", Func: "(*K).Add", Line: "second()", Call: "critletMore()"})
	more.Name = "more"
	gen := t.TempDir()
	plan, err := Build(up, repo, gen, []patched.Patch{ext, more})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	got := string(plan.Generated[filepath.Join(gen, "p", "k.go")])
	want := "package x\n\nfunc (k *K) Add() {\n\tfirst(); critletExt()\n\tsecond(); critletMore()\n}\n" +
		"func init() { critletHooked_ext(\"p/k.go:(*K).Add\") }\n" +
		"func init() { critletHooked_more(\"p/k.go:(*K).Add\") }\n"
	if got != want {
		t.Fatalf("hooked file:\n%s\nwant:\n%s", got, want)
	}
	more.Hooks[0].Line = "first()"
	if _, err := Build(up, repo, t.TempDir(), []patched.Patch{ext, more}); err == nil || !strings.Contains(err.Error(), "patch more: ") || !strings.Contains(err.Error(), "hooked twice") {
		t.Fatalf("the same line hooked by two patches: %v, want an error naming patch more", err)
	}
}

// A hook outside the patch's package registers through a registrar
// generated there, in that package's name; the patch's own registration
// declares none when it hooks nothing at home.
func TestHookInAnotherPackage(t *testing.T) {
	up := tree(t, "p/k.go=package x\n\nfunc f() {}\n", "q/k.go=package kubelet\n\nfunc New() {\n\twire()\n}\n")
	repo := tree(t, "p/critlet_ext.go="+addedSrc)
	ext := extending("p", patched.Hook{File: "q/k.go", Func: "New", Line: "wire()", Call: "x.CritletWrap()"})
	gen := t.TempDir()
	plan, err := Build(up, repo, gen, []patched.Patch{ext})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	hooked := string(plan.Generated[filepath.Join(gen, "q", "k.go")])
	if want := "package kubelet\n\nfunc New() {\n\twire(); x.CritletWrap()\n}\nfunc init() { critletHooked_ext(\"q/k.go:New\") }\n"; hooked != want {
		t.Fatalf("hooked file:\n%s\nwant:\n%s", hooked, want)
	}
	reg := string(plan.Generated[filepath.Join(gen, "q", "critlet_zz_generated_ext_hooks.go")])
	if !strings.Contains(reg, "package kubelet\n") || !strings.Contains(reg, "func critletHooked_ext(ids ...string)") || !strings.Contains(reg, `patched.RegisterHook("ext", id)`) {
		t.Fatalf("registrar in q:\n%s", reg)
	}
	own := string(plan.Generated[filepath.Join(gen, "p", "critlet_zz_generated_ext.go")])
	if strings.Contains(own, "critletHooked_ext") {
		t.Fatalf("the patch's own registration declares a registrar it has no hooked file for:\n%s", own)
	}
}
