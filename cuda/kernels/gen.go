//go:build ignore

// gen compiles the kernel sources of this directory to PTX with nvcc and rewrites
// manifest.json. Run it with `go generate ./cuda/kernels` (NVCC selects the compiler; default
// nvcc on PATH). Stale *.ptx files without a source are removed.
package main

import (
	"fmt"
	"os"

	"github.com/mtrl-go/mtrl/internal/kernelbuild"
)

func main() {
	if err := kernelbuild.Generate("."); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
