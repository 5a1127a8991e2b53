package mtrl_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// goldenHandler runs one case: it reads inputs and params from c, calls mtrl, and compares every
// output with c.Check. It returns the error the mtrl call returned, if any, so the runner can
// tell whether an error case was rejected.
type goldenHandler func(c *golden.Case) error

// goldenHandlers maps each op name of the vectors (a file's "op") to its handler;
// the op families live in golden_<package>_test.go.
func goldenHandlers() map[string]goldenHandler {
	all := map[string]goldenHandler{}
	for _, family := range []map[string]goldenHandler{
		tensorGolden(), divergenceGolden(), perturbGolden(), advantageGolden(), ppoGolden(), tprlGolden(),
	} {
		for op, h := range family {
			all[op] = h
		}
	}
	return all
}

// goldenDirs returns ../shared/golden (relative to the repository root, which is this package's
// directory) and $MTRL_GOLDEN_DIR when set.
func goldenDirs(t *testing.T) []string {
	var dirs []string
	if _, err := os.Stat(filepath.Join("..", "shared", "golden")); err == nil {
		dirs = append(dirs, filepath.Join("..", "shared", "golden"))
	} else if os.Getenv("MTRL_REQUIRE_GOLDEN") == "1" {
		t.Fatalf("MTRL_REQUIRE_GOLDEN=1 but ../shared/golden is missing: %v", err)
	}
	if d := os.Getenv("MTRL_GOLDEN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if len(dirs) == 0 {
		t.Skip("no golden vectors: ../shared/golden is absent and MTRL_GOLDEN_DIR is unset")
	}
	return dirs
}

func TestGolden(t *testing.T) { runGolden(t, tensor.CPU()) }

// runGolden runs every case of every golden file with its inputs on backend be (ops without a
// kernel there stage through host memory, as any caller's would).
func runGolden(t *testing.T, be tensor.Backend) {
	handlers := goldenHandlers()
	for _, dir := range goldenDirs(t) {
		files, err := golden.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("%s holds no *.json files", dir)
		}
		for _, f := range files {
			t.Run(f.Op, func(t *testing.T) {
				h, ok := handlers[f.Op]
				if !ok {
					t.Fatalf("%s: no handler for op %q", f.Path, f.Op)
				}
				for _, c := range f.Cases {
					c.Backend = be
					t.Run(c.Name, func(t *testing.T) { runGoldenCase(t, h, c) })
				}
			})
		}
	}
}

func runGoldenCase(t *testing.T, h goldenHandler, c *golden.Case) {
	c.Begin(t)
	err := h(c)
	var acc golden.Accepted
	if c.Error != "" {
		switch {
		case errors.As(err, &acc):
			t.Logf("reference raised %q; %v", c.Error, acc)
		case err == nil:
			t.Errorf("reference raised %q, mtrl returned no error", c.Error)
		default:
			t.Logf("rejected as the reference does (%q): %v", c.Error, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if u := c.Unchecked(); len(u) > 0 {
		t.Errorf("outputs not compared: %v", u)
	}
}
