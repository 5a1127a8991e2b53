// Package kernels holds the CUDA C sources of the example model's own kernels — the rollout's
// sampler and the trainer's optimizer steps, which have no SDK op (the model's layers run the
// SDK's ops on the cuda backend) — the PTX nvcc generates from them (committed, compute_80,
// embedded) and a manifest with the SHA-256 of every source and output. Package vlm loads
// them on a cuda.Backend with LoadModule (its CUDA op set, built with the `cuda` tag).
//
// Regenerate after editing a source (needs nvcc):
//
//	go generate ./examples/internal/vlm/kernels
//
// TestGenerated fails when a source or the PTX drifted from the manifest, and with nvcc on
// PATH recompiles and compares byte for byte. The emulator (internal/cuemu) compiles these
// sources too; scripts/cuda-emu fails when one of their kernels is never launched by a test.
package kernels

//go:generate go run github.com/mtrl-go/mtrl/internal/kernelbuild/ptxgen .

import (
	"embed"
	"slices"
	"strings"
)

//go:embed *.ptx
var files embed.FS

// Module is one compiled source file.
type Module struct {
	Name string // the source's base name without .cu, e.g. "attention"
	PTX  string
}

// Modules returns every embedded module, sorted by name.
func Modules() []Module {
	ents, _ := files.ReadDir(".")
	var out []Module
	for _, e := range ents {
		b, _ := files.ReadFile(e.Name())
		out = append(out, Module{Name: strings.TrimSuffix(e.Name(), ".ptx"), PTX: string(b)})
	}
	slices.SortFunc(out, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })
	return out
}
