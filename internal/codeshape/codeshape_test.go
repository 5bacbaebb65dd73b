package codeshape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	maxFileLines = 600
	maxFuncLines = 80
)

// issueCitation is a comment that names the issue that asked for the code rather than what the
// code guarantees.
var issueCitation = regexp.MustCompile(`(?i)\bissue [0-9]+`)

// TestCodeShape fails on every offence of the module: a file over maxFileLines lines ("file
// PATH"), a function over maxFuncLines lines, its signature to the closing brace ("func PATH
// NAME", NAME as Recv.Method for a method), and a comment citing an issue ("issue PATH").
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
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if m := issueCitation.FindString(c.Text); m != "" {
				out = append(out, offence{"issue " + rel, fmt.Sprintf("line %d cites %q: say what the code guarantees", fset.Position(c.Pos()).Line, m)})
			}
		}
	}
	return out
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
