package backendtest_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Package tensor and everything under it sit below the op families: importing one (as
// backendtest once imported every family's ops for its suites) would make the foundation depend
// on what is built on it. Each family's suite lives next to the family instead.
func TestTensorImportsNoFamily(t *testing.T) {
	const mod = "github.com/mtrl-go/mtrl/"
	higher := []string{"advantage", "divergence", "perturb", "ppo", "tprl", "conformance", "cuda", "examples"}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, h := range higher {
				if p == mod+h || strings.HasPrefix(p, mod+h+"/") {
					t.Errorf("%s imports %s, a package built on tensor", path, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
