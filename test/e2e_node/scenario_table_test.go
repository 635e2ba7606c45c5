package e2enode

// This file has no build tag: it runs with the unit tests, reading the
// suite's sources (which need the e2enode tag to compile) as text.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestScenarioTableMatchesTheSuite: docs/e2e-node.md's scenario table has a
// row for every scenario the suite runs and no other, in order (by number,
// then letter), so the table cannot drift from the tests.
func TestScenarioTableMatchesTheSuite(t *testing.T) {
	inSuite := suiteScenarios(t)
	if len(inSuite) < 20 {
		t.Fatalf("found %d scenarios in the suite (%q): the parse missed some", len(inSuite), inSuite)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "e2e-node.md"))
	if err != nil {
		t.Fatal(err)
	}
	var inTable []string
	row := regexp.MustCompile(`^\| (\d+[a-z]?) \|`)
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			inTable = append(inTable, m[1])
		}
	}
	if !slices.IsSortedFunc(inTable, compareScenarios) {
		t.Errorf("the table's rows are out of order: %q", inTable)
	}
	sorted := slices.Clone(inSuite)
	slices.SortFunc(sorted, compareScenarios)
	sorted = slices.Compact(sorted)
	table := slices.Clone(inTable)
	slices.SortFunc(table, compareScenarios)
	if !slices.Equal(sorted, table) {
		t.Errorf("the table has scenarios %q, the suite runs %q", table, sorted)
	}
}

// suiteScenarios returns the number of every runScenario call in the suite:
// the first word of its name, a string literal or fmt.Sprintf's format.
func suiteScenarios(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "runScenario" {
				return true
			}
			name := call.Args[1]
			if c, ok := name.(*ast.CallExpr); ok && len(c.Args) > 0 { // fmt.Sprintf("19 …", …)
				name = c.Args[0]
			}
			lit, ok := name.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: a scenario whose name is not a literal: the table cannot be checked", fset.Position(call.Pos()))
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			num, _, _ := strings.Cut(s, " ")
			out = append(out, num)
			return true
		})
	}
	return out
}

// compareScenarios orders "2" before "10", and "1a" before "1b".
func compareScenarios(a, b string) int {
	split := func(s string) (int, string) {
		i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
		if i < 0 {
			i = len(s)
		}
		n, _ := strconv.Atoi(s[:i])
		return n, s[i:]
	}
	an, as := split(a)
	bn, bs := split(b)
	if an != bn {
		return an - bn
	}
	return strings.Compare(as, bs)
}
