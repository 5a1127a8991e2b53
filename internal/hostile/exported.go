package hostile

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"testing"
)

// Test is a package's hostile-input test: Covered for the package in the current directory,
// then Check.
func Test(t *testing.T, funcs map[string]any, skip map[string]string, v *Values, opt Options) {
	t.Helper()
	Covered(t, ".", funcs, skip)
	Check(t, funcs, v, opt)
}

// Covered fails the test for every exported function and every exported method of an
// exported type declared in the package in dir (the files this build compiles, tests
// excluded) that is neither in funcs nor in skip (name → why it is not called). Names are
// "Func" and "Type.Method".
func Covered(t *testing.T, dir string, funcs map[string]any, skip map[string]string) {
	t.Helper()
	for _, name := range Exported(t, dir) {
		_, called := funcs[name]
		_, skipped := skip[name]
		if !called && !skipped {
			t.Errorf("%s is exported but not in the hostile-input table (add it, or to skip with a reason)", name)
		}
	}
}

// Exported lists the exported functions and methods of the package in dir, sorted.
func Exported(t *testing.T, dir string) []string {
	t.Helper()
	pkg, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, f := range pkg.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			if fd.Recv == nil {
				names = append(names, fd.Name.Name)
				continue
			}
			if recv := receiverType(fd.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+fd.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
