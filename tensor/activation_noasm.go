//go:build !amd64 || noasm

package tensor

import "github.com/mtrl-go/mtrl/internal/dispatch"

// actSIMD returns no vector activations: this build uses the Go loops only.
func actSIMD() []dispatch.Impl[actKernels] { return nil }
