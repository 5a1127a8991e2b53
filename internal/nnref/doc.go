// Package nnref holds the pure-Go reference kernels of the transformer ops of package tensor
// (matmul, linear, norms, RoPE, attention, activations, embedding, AdamW, the fused LM head).
//
// Every kernel that has a gradient is written once, generic over float32 and float64: the
// tensor entry points run it in float32, and the tests run it in float64 against central finite
// differences (internal/gradcheck). The kernels trust their arguments (the entry points
// validate), run in parallel over independent rows or heads with internal/parallel, and sum in
// a fixed order, so their results do not depend on GOMAXPROCS.
//
// Products are rounded before they are added (F(a*b)), which forbids the compiler from fusing
// them into FMAs: the reference's bits do not depend on GOAMD64.
package nnref

import "github.com/mtrl-go/mtrl/internal/hostops"

// Float is the element type of the kernels: float32 in production, float64 in gradient checks.
type Float = hostops.Float
