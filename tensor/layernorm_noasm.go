//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// lnSIMD returns no vector LayerNorm kernels: this build uses the Go loops only.
func lnSIMD() []dispatch.Impl[lnKernels] { return nil }
