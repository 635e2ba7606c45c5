package overlay

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/critlet/critlet/pkg/patched"
)

// tree writes files (slash paths relative to the returned root) to a new
// temporary directory.
func tree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name     string
		upstream []string
		repo     []string
		pkgs     []string
		// want maps upstream-relative keys to repo-relative values ("" deletes).
		want    map[string]string
		wantErr string
	}{
		{
			name:     "replaces, adds and deletes; leaves tests, other files and subpackages alone",
			upstream: []string{"p/a.go", "p/b.go", "p/a_test.go", "p/OWNERS", "p/sub/s.go", "q/q.go"},
			repo:     []string{"p/a.go", "p/new.go", "p/new_test.go", "p/sub/victims/v.go", "q/q.go"},
			pkgs:     []string{"p"},
			want: map[string]string{
				"p/a.go":   "p/a.go",
				"p/b.go":   "",
				"p/new.go": "p/new.go",
			},
		},
		{
			name:     "several packages, nested declarations, ignored file names",
			upstream: []string{"pkg/x/x.go", "pkg/x/y/y.go", "pkg/x/y/y_linux.go", "pkg/x/_skip.go", "pkg/x/.hidden.go"},
			repo:     []string{"pkg/x/x1.go", "pkg/x/y/z.go", "pkg/x/_draft.go"},
			pkgs:     []string{"pkg/x", "pkg/x/y"},
			want: map[string]string{
				"pkg/x/x.go":         "",
				"pkg/x/x1.go":        "pkg/x/x1.go",
				"pkg/x/y/y.go":       "",
				"pkg/x/y/y_linux.go": "",
				"pkg/x/y/z.go":       "pkg/x/y/z.go",
			},
		},
		{
			name:     "declared package missing upstream",
			upstream: []string{"other/o.go"},
			repo:     []string{"p/a.go"},
			pkgs:     []string{"p"},
			wantErr:  "upstream package p",
		},
		{
			name:     "declared package missing in the repository",
			upstream: []string{"p/a.go"},
			repo:     []string{"other/o.go"},
			pkgs:     []string{"p"},
			wantErr:  "replacement package p",
		},
		{
			name:     "upstream package has only tests",
			upstream: []string{"p/a_test.go"},
			repo:     []string{"p/a.go"},
			pkgs:     []string{"p"},
			wantErr:  "no non-test Go files",
		},
		{
			name:     "replacement has files only in a subpackage",
			upstream: []string{"p/a.go"},
			repo:     []string{"p/victims/v.go", "p/a_test.go"},
			pkgs:     []string{"p"},
			wantErr:  "no non-test Go files",
		},
		{
			name:     "assembly cannot be replaced by Go files",
			upstream: []string{"p/a.go", "p/a_amd64.s"},
			repo:     []string{"p/a.go"},
			pkgs:     []string{"p"},
			wantErr:  "non-Go source",
		},
		{
			name:     "declared twice",
			upstream: []string{"p/a.go"},
			repo:     []string{"p/a.go"},
			pkgs:     []string{"p", "p"},
			wantErr:  "declared twice",
		},
		{name: "nothing declared", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, wantErr: "no packages"},
		{name: "escapes the module", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, pkgs: []string{"../p"}, wantErr: "clean, slash-separated"},
		{name: "absolute", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, pkgs: []string{"/p"}, wantErr: "clean, slash-separated"},
		{name: "unclean", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, pkgs: []string{"p/"}, wantErr: "clean, slash-separated"},
		{name: "empty", upstream: []string{"p/a.go"}, repo: []string{"p/a.go"}, pkgs: []string{""}, wantErr: "clean, slash-separated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, repo := tree(t, tc.upstream...), tree(t, tc.repo...)
			got, err := Generate(up, repo, tc.pkgs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Generate error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			want := map[string]string{}
			for k, v := range tc.want {
				if v != "" {
					v = filepath.Join(repo, filepath.FromSlash(v))
				}
				want[filepath.Join(up, filepath.FromSlash(k))] = v
			}
			if len(got.Replace) != len(want) {
				t.Errorf("got %d entries, want %d:\n got %v\nwant %v", len(got.Replace), len(want), got.Replace, want)
			}
			for k, v := range want {
				if g, ok := got.Replace[k]; !ok || g != v {
					t.Errorf("Replace[%s] = %q (present %v), want %q", k, g, ok, v)
				}
			}
			checkTouchesExactly(t, got, up, repo, tc.pkgs)
		})
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

// TestRealOverlayTouchesOnlyDeclaredPackages generates the overlay the build
// uses, from patched.Packages, this repository and the pinned upstream module,
// and checks it against a listing made independently of Generate.
func TestRealOverlayTouchesOnlyDeclaredPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating k8s.io/kubernetes (run 'go mod download' first): %v", err)
	}
	up := strings.TrimSpace(string(out))
	if up == "" {
		t.Fatal("k8s.io/kubernetes is not in the module cache; run 'go mod download'")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Generate(up, repo, patched.Packages)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkTouchesExactly(t, f, up, repo, patched.Packages)
}

// checkTouchesExactly asserts that every overlay key lies directly in a
// declared package directory of the upstream copy, that every non-test Go file
// of each declared upstream package is deleted or replaced, that every non-test
// Go file of each replacement is added under its own name, and nothing else.
func checkTouchesExactly(t *testing.T, f *File, up, repo string, pkgs []string) {
	t.Helper()
	declared := map[string]string{} // upstream package dir -> repo package dir
	for _, p := range pkgs {
		declared[filepath.Join(up, filepath.FromSlash(p))] = filepath.Join(repo, filepath.FromSlash(p))
	}
	for k, v := range f.Replace {
		repoDir, ok := declared[filepath.Dir(k)]
		if !ok {
			t.Errorf("overlay key %s is outside the declared packages", k)
			continue
		}
		if strings.HasSuffix(k, "_test.go") || filepath.Ext(k) != ".go" {
			t.Errorf("overlay key %s is not a non-test Go file", k)
		}
		if v != "" && v != filepath.Join(repoDir, filepath.Base(k)) {
			t.Errorf("overlay maps %s to %s, want the replacement's file of the same name", k, v)
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
	for upDir, repoDir := range declared {
		ups, ours := nonTestGo(upDir), nonTestGo(repoDir)
		if len(ups) == 0 || len(ours) == 0 {
			t.Errorf("declared package %s: %d upstream and %d replacement files; want both non-empty", upDir, len(ups), len(ours))
		}
		for _, b := range ups {
			if _, ok := f.Replace[filepath.Join(upDir, b)]; !ok {
				t.Errorf("upstream file %s survives the overlay", filepath.Join(upDir, b))
			}
		}
		for _, b := range ours {
			if got := f.Replace[filepath.Join(upDir, b)]; got != filepath.Join(repoDir, b) {
				t.Errorf("replacement file %s is not added (overlay has %q)", filepath.Join(repoDir, b), got)
			}
		}
	}
}
