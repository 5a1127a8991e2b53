//go:build ignore

// gen compiles the kernel sources of this directory to PTX with nvcc and rewrites
// manifest.json. Run it with `go generate ./cuda/kernels` (NVCC selects the compiler; default
// nvcc on PATH). Stale *.ptx files without a source are removed.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	kernels "github.com/mtrl-go/mtrl/cuda/kernels/internal/build"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run() error {
	nvcc := os.Getenv("NVCC")
	if nvcc == "" {
		nvcc = "nvcc"
	}
	ver, err := kernels.NVCCVersion(nvcc)
	if err != nil {
		return fmt.Errorf("%s --version: %v (install nvidia-cuda-toolkit)", nvcc, err)
	}
	out, err := kernels.Compile(nvcc, ".")
	if err != nil {
		return err
	}
	old, _ := filepath.Glob("*.ptx")
	for _, f := range old {
		if _, ok := out[f]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for f, b := range out {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return err
		}
	}
	m, err := kernels.BuildManifest(".", ver, out)
	if err != nil {
		return err
	}
	if err := os.WriteFile("manifest.json", m.Encode(), 0o644); err != nil {
		return err
	}
	fmt.Printf("gen: %d modules with %s (%s)\n", len(out), ver, strings.Join(kernels.NVCCFlags, " "))
	return nil
}
