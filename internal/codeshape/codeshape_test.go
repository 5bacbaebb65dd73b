package codeshape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	maxFileLines = 600
	maxFuncLines = 80
	// A function of a package in signatureScope takes at most maxParams parameters and returns
	// at most maxResults results (the receiver not counted): more is a struct of parameters or a
	// method on the type that holds them.
	maxParams  = 5
	maxResults = 3
)

// signatureScope lists the directories, relative to the module's root, whose non-test files keep
// to maxParams and maxResults: "dir" is that package alone, "dir/..." it and every package below
// it, "..." the whole module.
var signatureScope = []string{"..."}

// inScope says whether the file rel (slash-separated, relative to the module's root) is in a
// package scope names.
func inScope(rel string, scope []string) bool {
	dir := path.Dir(rel)
	for _, s := range scope {
		switch {
		case s == "...":
			return true
		case strings.HasSuffix(s, "/..."):
			if base := strings.TrimSuffix(s, "/..."); dir == base || strings.HasPrefix(dir, base+"/") {
				return true
			}
		case dir == s:
			return true
		}
	}
	return false
}

// issueCitation is a comment that names the issue that asked for the code rather than what the
// code guarantees.
var issueCitation = regexp.MustCompile(`(?i)\bissue [0-9]+`)

// TestCodeShape fails on every offence of the module: a file over maxFileLines lines ("file
// PATH"), a function over maxFuncLines lines, its signature to the closing brace ("func PATH
// NAME", NAME as Recv.Method for a method), a comment citing an issue ("issue PATH"), and, in
// signatureScope, a function, method, function literal or function type with more than maxParams
// parameters or maxResults results ("signature PATH NAME").
func TestCodeShape(t *testing.T) {
	for _, o := range offences(t, moduleRoot(t)) {
		t.Errorf("%s (%s)", o.key, o.what)
	}
}

type offence struct {
	key  string // what it is and where
	what string
}

func offences(t *testing.T, root string) []offence {
	t.Helper()
	var out []offence
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		out = append(out, fileOffences(fset, f, rel)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileOffences(fset *token.FileSet, f *ast.File, rel string) []offence {
	var out []offence
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		out = append(out, offence{"file " + rel, fmt.Sprintf("%d lines, over %d", n, maxFileLines)})
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
			out = append(out, offence{"func " + rel + " " + funcName(fn), fmt.Sprintf("%d lines, over %d", n, maxFuncLines)})
		}
	}
	if !strings.HasSuffix(rel, "_test.go") && inScope(rel, signatureScope) {
		out = append(out, signatureOffences(fset, f, rel)...)
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if m := issueCitation.FindString(c.Text); m != "" {
				out = append(out, offence{"issue " + rel, fmt.Sprintf("line %d cites %q: say what the code guarantees", fset.Position(c.Pos()).Line, m)})
			}
		}
	}
	return out
}

// signatureOffences are f's functions with more than maxParams parameters or maxResults results:
// declared functions and methods, function literals, interface methods and function types.
func signatureOffences(fset *token.FileSet, f *ast.File, rel string) []offence {
	var out []offence
	check := func(name string, ft *ast.FuncType) {
		p, r := fieldCount(ft.Params), fieldCount(ft.Results)
		if p > maxParams || r > maxResults {
			out = append(out, offence{"signature " + rel + " " + name,
				fmt.Sprintf("%d parameters (at most %d), %d results (at most %d): group them in a struct or a method on the type that holds them", p, maxParams, r, maxResults)})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			check(funcName(x), x.Type)
			for _, l := range []*ast.FieldList{x.Type.Params, x.Type.Results} {
				if l != nil { // function types among the parameters and results
					ast.Inspect(l, func(n ast.Node) bool { return funcTypes(n, fset, check) })
				}
			}
			if x.Body != nil {
				ast.Inspect(x.Body, func(n ast.Node) bool {
					if lit, ok := n.(*ast.FuncLit); ok {
						check(fmt.Sprintf("%s (func literal, line %d)", funcName(x), fset.Position(lit.Pos()).Line), lit.Type)
						ast.Inspect(lit.Body, func(m ast.Node) bool { return funcTypes(m, fset, check) })
						return false
					}
					return funcTypes(n, fset, check)
				})
			}
			return false
		default:
			return funcTypes(n, fset, check)
		}
	})
	return out
}

// funcTypes checks a function type outside a declaration or literal (a field, an interface
// method, a type or a variable); it says whether to look inside n.
func funcTypes(n ast.Node, fset *token.FileSet, check func(string, *ast.FuncType)) bool {
	if ft, ok := n.(*ast.FuncType); ok {
		check(fmt.Sprintf("(func type, line %d)", fset.Position(ft.Pos()).Line), ft)
	}
	return true
}

// fieldCount is the number of parameters or results a list declares: one per name, one per
// unnamed entry.
func fieldCount(l *ast.FieldList) int {
	if l == nil {
		return 0
	}
	n := 0
	for _, f := range l.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// funcName is Name, or Recv.Name for a method (the receiver's type without * and type
// parameters).
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// TestSignatureRuleFindsEveryKindOfFunction proves the signature rule sees too many parameters or
// results wherever a function is written, and that test files and packages out of scope are left
// alone.
func TestSignatureRuleFindsEveryKindOfFunction(t *testing.T) {
	const src = `package forwarder

type fw struct{ cb func(a, b, c, d, e, f int) }

type pager interface{ page() (int, int, int, error) }

func six(a, b, c, d, e, f int) {}

func (x *fw) four() (int, int, int, error) { return 0, 0, 0, nil }

func ok(a, b, c, d, cb func(a, b, c, d, e, f int)) (int, int, error) {
	g := func(a, b, c, d, e, f int) {}
	_ = g
	return 0, 0, nil
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range fileOffences(fset, f, "forwarder/x.go") {
		got = append(got, o.key)
	}
	want := []string{
		"signature forwarder/x.go (func type, line 3)",
		"signature forwarder/x.go (func type, line 5)",
		"signature forwarder/x.go six",
		"signature forwarder/x.go fw.four",
		"signature forwarder/x.go (func type, line 11)",
		"signature forwarder/x.go ok (func literal, line 12)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("offences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, rel := range []string{"forwarder/x_test.go", "ha/x_test.go"} {
		if o := fileOffences(fset, f, rel); len(o) != 0 {
			t.Errorf("%s: %v, want none (not in scope)", rel, o)
		}
	}
}

// typeLimit bounds a type that tends to grow: at most fields fields and methods methods, counted
// over the non-test files of the package in dir (relative to the module's root).
type typeLimit struct {
	dir, name       string
	fields, methods int
}

// typeLimits are the types kept small: a small core, the rest in parts with names (the
// forwarder's journal reader, stream side and observer; the coordinator's lease table, loop,
// watch and renewer; the checker's schedule, commands and sweep; the daemon's lifecycle,
// builder, reload record and replicas; the store's push pacing, refresh record, observing, name
// book, domain filter and device sweep), so that the state that decides does not
// hide among the state that observes.
var typeLimits = []typeLimit{
	{dir: "forwarder", name: "Forwarder", fields: 20, methods: 25},
	{dir: "ha", name: "Coordinator", fields: 20, methods: 25},
	{dir: "guest", name: "Checker", fields: 20, methods: 25},
	{dir: "internal/daemon", name: "Daemon", fields: 20, methods: 25},
	{dir: "inventory", name: "Store", fields: 20, methods: 25},
}

// TestTypeSizes fails on a type of typeLimits with more fields or methods than its limits
// ("type DIR.NAME"), or that is no longer found (a rename must carry its limit along).
func TestTypeSizes(t *testing.T) {
	root := moduleRoot(t)
	for _, l := range typeLimits {
		fields, methods, err := typeSize(filepath.Join(root, filepath.FromSlash(l.dir)), l.name)
		switch {
		case err != nil:
			t.Errorf("type %s.%s: %v", l.dir, l.name, err)
		case fields > l.fields || methods > l.methods:
			t.Errorf("type %s.%s (%d fields, at most %d; %d methods, at most %d: group state in named parts with their own methods)",
				l.dir, l.name, fields, l.fields, methods, l.methods)
		}
	}
}

// typeSize counts the fields of the struct type name in the package in dir (an embedded field
// counts one) and the methods declared on it, in its non-test files; fields is -1 when no struct
// type of that name is declared there.
func typeSize(dir, name string) (fields, methods int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, 0, err
	}
	fields = -1
	fset := token.NewFileSet()
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return 0, 0, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if strings.HasPrefix(funcName(d), name+".") {
					methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
						if st, ok := ts.Type.(*ast.StructType); ok {
							fields = fieldCount(st.Fields)
						}
					}
				}
			}
		}
	}
	if fields < 0 {
		return 0, 0, fmt.Errorf("no struct type %s declared in %s", name, dir)
	}
	return fields, methods, nil
}
