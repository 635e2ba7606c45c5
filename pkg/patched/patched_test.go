package patched

import (
	"slices"
	"strings"
	"testing"
)

func TestDeclarationIsValid(t *testing.T) {
	if err := Validate(Patches); err != nil {
		t.Fatal(err)
	}
	for _, p := range Patches {
		if got, ok := Named(p.Name); !ok || got.Name != p.Name {
			t.Errorf("Named(%q) = %v, %v", p.Name, got.Name, ok)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	ok := Patch{Name: "p", Change: "c", Issues: []string{"i"}, Package: "pkg/a", Setting: "s", SettingHelp: "h",
		Hooks: []Hook{{File: "pkg/a/a.go", Func: "f", Line: "g()", Call: "h()"}}, Proof: []Reach{{"x", "y"}}}
	if err := Validate([]Patch{ok}); err != nil {
		t.Fatalf("valid patch refused: %v", err)
	}
	// Two extensions of one package, each hooking its own file.
	second := ok
	second.Name = "q"
	second.Hooks = []Hook{{File: "pkg/a/b.go", Func: "f", Line: "g()", Call: "h()"}}
	if err := Validate([]Patch{ok, second}); err != nil {
		t.Fatalf("two extensions of one package refused: %v", err)
	}
	// A hook where upstream wires the patch's code, in another package.
	elsewhere := ok
	elsewhere.Hooks = []Hook{ok.Hooks[0], {File: "pkg/b/b.go", Func: "f", Line: "g()", Call: "a.H()"}, {File: "pkg/b/c.go", Func: "f", Line: "g()", Call: "a.H()"}}
	if err := Validate([]Patch{elsewhere}); err != nil {
		t.Fatalf("a hook in another package refused: %v", err)
	}
	if got := elsewhere.HookedPackages(); !slices.Equal(got, []string{"pkg/b"}) {
		t.Errorf("HookedPackages = %q, want [pkg/b]", got)
	}
	if !elsewhere.HooksIn("pkg/a") || !elsewhere.HooksIn("pkg/b") || elsewhere.HooksIn("pkg/c") || second.HooksIn("pkg/b") {
		t.Error("HooksIn: wrong answer")
	}
	with := func(f func(*Patch)) []Patch {
		p := ok
		p.Hooks = append([]Hook(nil), ok.Hooks...)
		f(&p)
		return []Patch{p}
	}
	tests := []struct {
		name    string
		patches []Patch
		want    string
	}{
		{"no name", with(func(p *Patch) { p.Name = "" }), "name"},
		{"comma in name", with(func(p *Patch) { p.Name = "a,b" }), "name"},
		{"twice", append(with(func(*Patch) {}), ok), "declared twice"},
		{"replaced package patched again", append(with(func(p *Patch) { p.Hooks = nil; p.Replaces = true }), func() Patch { p := ok; p.Name = "q"; return p }()), "a replaced package has no other patch"},
		{"files alike", append(with(func(*Patch) {}), func() Patch {
			p := ok
			p.Name = "p-q"
			p.Hooks = []Hook{{File: "pkg/a/b.go", Func: "f", Line: "g()", Call: "h()"}}
			return p
		}()), "could not be told"},
		{"unclean package", with(func(p *Patch) { p.Package = "pkg/a/" }), "clean"},
		{"escaping package", with(func(p *Patch) { p.Package = "../a" }), "clean"},
		{"no issue", with(func(p *Patch) { p.Issues = nil }), "upstream issues"},
		{"setting without help", with(func(p *Patch) { p.SettingHelp = "" }), "go together"},
		{"help without setting", with(func(p *Patch) { p.Setting = "" }), "go together"},
		{"replacement with hooks", with(func(p *Patch) { p.Replaces = true }), "nothing to hook"},
		{"extension without hooks", with(func(p *Patch) { p.Hooks = nil }), "no hook calls them"},
		{"hook file escaping", with(func(p *Patch) { p.Hooks[0].File = "../b/b.go" }), "clean path"},
		{"hook file outside a package", with(func(p *Patch) { p.Hooks[0].File = "b.go" }), "clean path"},
		{"hook file not Go", with(func(p *Patch) { p.Hooks[0].File = "pkg/a/a.s" }), "clean path"},
		{"hook in a replaced package", append(with(func(p *Patch) { p.Hooks[0].File = "pkg/r/r.go" }), func() Patch {
			r := ok
			r.Name, r.Package, r.Replaces, r.Hooks, r.Setting, r.SettingHelp = "r", "pkg/r", true, nil, "", ""
			return r
		}()), "replaces whole"},
		{"indented line", with(func(p *Patch) { p.Hooks[0].Line = "\tg()" }), "one unindented line"},
		{"two-line call", with(func(p *Patch) { p.Hooks[0].Call = "h()\ni()" }), "one unindented line"},
		{"hook twice", with(func(p *Patch) { p.Hooks = append(p.Hooks, p.Hooks[0]) }), "declared twice"},
		{"no proof", with(func(p *Patch) { p.Proof = nil }), "no proof"},
	}
	for _, tc := range tests {
		if err := Validate(tc.patches); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestVerify(t *testing.T) {
	patches := []Patch{
		{Name: "swap", Package: "pkg/a", Replaces: true},
		{Name: "hooks", Package: "pkg/b", Hooks: []Hook{{File: "pkg/b/b.go", Func: "(*K).F"}, {File: "pkg/b/b.go", Func: "G"}}},
	}
	full := map[string]Registration{
		"swap":  {ImportPath: UpstreamModule + "/pkg/a"},
		"hooks": {ImportPath: UpstreamModule + "/pkg/b", Hooks: []string{"pkg/b/b.go:(*K).F", "pkg/b/b.go:G"}},
	}
	if err := verify(patches, full); err != nil {
		t.Fatalf("complete build refused: %v", err)
	}
	tests := []struct {
		name string
		got  map[string]Registration
		want string
	}{
		{"nothing linked (plain go build)", map[string]Registration{}, "hooks (k8s.io/kubernetes/pkg/b) is missing; swap (k8s.io/kubernetes/pkg/a) is missing"},
		{"compiled under its own path", map[string]Registration{"swap": {ImportPath: "github.com/critlet/critlet/pkg/a"}, "hooks": full["hooks"]}, "swap is linked as github.com/critlet/critlet/pkg/a"},
		{"a hook missing", map[string]Registration{"swap": full["swap"], "hooks": {ImportPath: UpstreamModule + "/pkg/b", Hooks: []string{"pkg/b/b.go:G"}}}, "hooks has hooks [pkg/b/b.go:G], want [pkg/b/b.go:(*K).F pkg/b/b.go:G]"},
		{"hooks without the files", map[string]Registration{"swap": full["swap"], "hooks": {Hooks: full["hooks"].Hooks}}, "hooks has hooks but not its files"},
	}
	for _, tc := range tests {
		err := verify(patches, tc.got)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "make kubelet") {
			t.Errorf("%s: %v, want an error containing %q and how to build", tc.name, err, tc.want)
		}
	}
}

func TestRegisterCollectsHooksInAnyOrder(t *testing.T) {
	RegisterHook("t-order", "b.go:G")
	Register("t-order", "x/y")
	RegisterHook("t-order", "a.go:F")
	got := Registered()["t-order"]
	if got.ImportPath != "x/y" || strings.Join(got.Hooks, " ") != "a.go:F b.go:G" {
		t.Fatalf("registration %+v", got)
	}
}
