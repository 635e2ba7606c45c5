package overlay

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"

	"github.com/critlet/critlet/pkg/patched"
)

// HookError is a hook that does not apply to the upstream file as it is.
type HookError struct {
	File string
	Hook patched.Hook
	Err  error
}

func (e *HookError) Error() string {
	return fmt.Sprintf("hook in %s, %s, on line %q: %v (port the hook to this upstream version)", e.File, e.Hook.Func, e.Hook.Line, e.Err)
}

func (e *HookError) Unwrap() error { return e.Err }

// ApplyHooks returns src, the upstream file named file, with each hook's
// call appended to its line. A hook applies only when its function is
// declared exactly once in src and exactly one line of that function's
// body is, without indentation, the hook's line; anything else is a
// HookError. The result has the same lines as src, each unchanged but the
// hooked ones, and must still parse.
func ApplyHooks(file string, src []byte, hooks []patched.Hook) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", file, err)
	}
	lines := bytes.SplitAfter(src, []byte("\n"))
	// Lines are matched as upstream wrote them, not as earlier hooks left them.
	orig := slices.Clone(lines)
	hooked := map[int]bool{}
	for _, h := range hooks {
		if strings.Contains(h.Line, "//") || strings.Contains(h.Line, "/*") {
			return nil, &HookError{file, h, fmt.Errorf("a hooked line may not hold a comment: the call would be commented out")}
		}
		body, err := funcBody(fset, f, h.Func)
		if err != nil {
			return nil, &HookError{file, h, err}
		}
		first, last := fset.Position(body.Lbrace).Line, fset.Position(body.Rbrace).Line
		var at []int
		for n := first; n <= last; n++ {
			if strings.TrimSpace(string(orig[n-1])) == h.Line {
				at = append(at, n)
			}
		}
		if len(at) != 1 {
			return nil, &HookError{file, h, fmt.Errorf("the line occurs %d times in the function's body, want exactly once", len(at))}
		}
		n := at[0]
		if hooked[n] {
			return nil, &HookError{file, h, fmt.Errorf("line %d is hooked twice", n)}
		}
		hooked[n] = true
		text := strings.TrimRight(string(orig[n-1]), "\r\n")
		lines[n-1] = []byte(text + "; " + h.Call + "\n")
	}
	out := bytes.Join(lines, nil)
	if _, err := parser.ParseFile(token.NewFileSet(), file, out, parser.SkipObjectResolution); err != nil {
		return nil, fmt.Errorf("%s no longer parses once hooked: %w", file, err)
	}
	return out, nil
}

// funcBody finds the one declaration of name, a function ("f") or a method
// ("(*T).m" or "T.m"), in f.
func funcBody(fset *token.FileSet, f *ast.File, name string) (*ast.BlockStmt, error) {
	var found []*ast.FuncDecl
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if ok && fd.Body != nil && funcName(fd) == name {
			found = append(found, fd)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no function %s in the file", name)
	case 1:
		return found[0].Body, nil
	default:
		return nil, fmt.Errorf("function %s is declared %d times (build constraints?)", name, len(found))
	}
}

// funcName names a declaration as hooks do.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	if !ok {
		return ""
	}
	if star != "" {
		return "(*" + id.Name + ")." + fd.Name.Name
	}
	return id.Name + "." + fd.Name.Name
}
