package preemption

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// logCall is one structured log call as written in source: its verbosity
// (-1 for Error), message and keys.
type logCall struct {
	level int
	msg   string
	keys  string
}

// logCalls returns the log calls of the Go files (tests excluded) in dir.
// It reads calls of the forms x.Info(msg, kv...), x.V(n).Info(msg, kv...)
// and x.Error(err, msg, kv...) whose message and keys are literals.
func logCalls(t *testing.T, dir string) []logCall {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []logCall
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Info" && sel.Sel.Name != "Error") {
				return true
			}
			c := logCall{level: 0}
			args := call.Args
			if sel.Sel.Name == "Error" {
				c.level = -1
				if len(args) == 0 {
					return true
				}
				args = args[1:]
			} else if v, ok := sel.X.(*ast.CallExpr); ok {
				if vs, ok := v.Fun.(*ast.SelectorExpr); ok && vs.Sel.Name == "V" && len(v.Args) == 1 {
					if lit, ok := v.Args[0].(*ast.BasicLit); ok {
						c.level, _ = strconv.Atoi(lit.Value)
					}
				}
			}
			if len(args) == 0 {
				return true
			}
			lit, ok := args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			c.msg, _ = strconv.Unquote(lit.Value)
			var keys []string
			for k := 1; k < len(args); k += 2 {
				if key, ok := args[k].(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(key.Value)
					keys = append(keys, s)
				}
			}
			c.keys = strings.Join(keys, ",")
			out = append(out, c)
			return true
		})
	}
	return out
}

// Every log line upstream's handler writes, with its verbosity and keys,
// is written by critlet's too: operators' alerts keep matching. Read from
// the pinned module's source, so an upstream bump that changes them fails
// here (the differential test checks the same lines at run time).
func TestStockLogLinesKept(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("locating the pinned k8s.io/kubernetes module: %v", err)
	}
	upstream := logCalls(t, filepath.Join(strings.TrimSpace(string(out)), "pkg", "kubelet", "preemption"))
	if len(upstream) < 3 {
		t.Fatalf("found only %d log calls in upstream's handler: %+v; the parser is off", len(upstream), upstream)
	}
	ours := logCalls(t, ".")
	for _, c := range upstream {
		if !slices.Contains(ours, c) {
			t.Errorf("upstream logs %q (verbosity %d, keys %s); critlet does not", c.msg, c.level, c.keys)
		}
	}
}
