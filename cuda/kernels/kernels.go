// Package kernels holds the CUDA C sources of the mtrl kernels (*.cu, common.cuh), the PTX that
// nvcc generates from them (committed, compute_80) and a manifest recording the SHA-256 of every
// source and generated file and the nvcc that produced them. The PTX is embedded with go:embed
// and loaded by package cuda (under the `cuda` build tag); this package itself needs neither
// cgo nor CUDA.
//
// Regenerate after editing a source (needs nvcc; Debian bookworm's nvidia-cuda-toolkit works):
//
//	go generate ./cuda/kernels
//
// TestGenerated (no GPU, no build tag) fails when a source no longer matches the manifest or the
// committed PTX differs from the manifest; with nvcc on PATH it also recompiles every source and
// compares the output byte for byte (it skips that step with a message when nvcc is absent, and
// fails instead when MTRL_REQUIRE_NVCC=1).
//
// Kernel names follow `<family>_<op>_<fwd|bwd>_<dtype>`.
package kernels

//go:generate go run github.com/mtrl-go/mtrl/internal/kernelbuild/ptxgen .

import (
	"embed"
	"path"
	"slices"
	"strings"
)

//go:embed *.ptx manifest.json
var files embed.FS

// Module is one compiled source file.
type Module struct {
	Name string // the source's base name without .cu, e.g. "logprob"
	PTX  string // the PTX text
}

// Modules returns every embedded module, sorted by name.
func Modules() []Module {
	ents, _ := files.ReadDir(".")
	var out []Module
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".ptx") {
			continue
		}
		b, _ := files.ReadFile(e.Name())
		out = append(out, Module{Name: strings.TrimSuffix(path.Base(e.Name()), ".ptx"), PTX: string(b)})
	}
	slices.SortFunc(out, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })
	return out
}
