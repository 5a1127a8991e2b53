//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// rowSIMD returns no vector row kernels: this build uses the Go loops only.
func rowSIMD() []dispatch.Impl[rowKernels] { return nil }
