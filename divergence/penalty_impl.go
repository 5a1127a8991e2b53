package divergence

import (
	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// penaltySIMD is one vector implementation of the elementwise low_var_kl family
// (penalty_amd64.go). Its kernels take whole vectors only; the callers finish tails in Go.
type penaltySIMD struct {
	lanes                      int
	lowVarKL, grad, perception func(dst, a, b []float32)
}

// penaltyImpls lists the implementations of the elementwise kernels this build can run on this
// CPU, best first; the pure-Go one (nil kernels) is always last. Fixed at start-up; only the
// package's tests and benchmarks change the selection.
var penaltyImpls = dispatch.New(simdPenaltyImpls()...)

// simdGrain is the chunk of the vectorized elementwise kernels: about 0.1 ms of work per
// chunk on one core, so a [64, 1024] batch runs on the calling goroutine (starting goroutines
// costs more than the whole pass) and large batches still spread over the cores.
const simdGrain = 1 << 18

// run applies fn to whole vectors of dst, a, b and tail to the rest, in parallel chunks of
// simdGrain elements (a multiple of every lane count).
func (k *penaltySIMD) run(dst, a, b []float32, fn func(dst, a, b []float32), tail func(dst, a, b []float32)) {
	parallel.For(len(dst), simdGrain, func(lo, hi int) {
		k.chunk(dst[lo:hi], a[lo:hi], b[lo:hi], fn, tail)
	})
}

// chunk applies fn to the whole vectors of one chunk and tail to the rest, on this goroutine.
func (k *penaltySIMD) chunk(d, a, b []float32, fn func(dst, a, b []float32), tail func(dst, a, b []float32)) {
	n := len(d) &^ (k.lanes - 1)
	if n > 0 {
		fn(d[:n], a[:n], b[:n])
	}
	if n < len(d) {
		tail(d[n:], a[n:], b[n:])
	}
}
