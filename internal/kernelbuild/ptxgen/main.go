// Command ptxgen compiles the CUDA sources of a directory to committed PTX and rewrites its
// manifest.json (kernelbuild.Generate); a kernel directory's go:generate line runs it:
//
//	//go:generate go run github.com/mtrl-go/mtrl/internal/kernelbuild/ptxgen DIR
package main

import (
	"fmt"
	"os"

	"github.com/mtrl-go/mtrl/internal/kernelbuild"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ptxgen DIR")
		os.Exit(2)
	}
	if err := kernelbuild.Generate(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
}
