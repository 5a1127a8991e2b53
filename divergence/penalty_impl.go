package divergence

import (
	"sync/atomic"

	"github.com/mtrl-go/mtrl/internal/parallel"
)

// penaltySIMD is one vector implementation of the elementwise low_var_kl family
// (penalty_amd64.go). Its kernels take whole vectors only; the callers finish tails in Go.
type penaltySIMD struct {
	lanes                      int
	lowVarKL, grad, perception func(dst, a, b []float32)
}

// penaltyImpl is an implementation of the elementwise kernels: simd nil is the pure-Go one.
type penaltyImpl struct {
	name string
	simd *penaltySIMD
}

// penaltyImpls lists the implementations this build can run on this CPU, best first; the
// pure-Go one is always last. Fixed at start-up.
var penaltyImpls = append(simdPenaltyImpls(), penaltyImpl{name: "go"})

// penaltySelect indexes penaltyImpls; only the package's tests and benchmarks change it.
var penaltySelect atomic.Int32

func activePenalty() *penaltySIMD { return penaltyImpls[penaltySelect.Load()].simd }

// simdGrain is the chunk of the vectorized elementwise kernels: about 0.1 ms of work per
// chunk on one core, so a [64, 1024] batch runs on the calling goroutine (starting goroutines
// costs more than the whole pass) and large batches still spread over the cores.
const simdGrain = 1 << 18

// run applies fn to whole vectors of dst, a, b and tail to the rest, in parallel chunks of
// simdGrain elements (a multiple of every lane count).
func (k *penaltySIMD) run(dst, a, b []float32, fn func(dst, a, b []float32), tail func(dst, a, b []float32)) {
	parallel.For(len(dst), simdGrain, func(lo, hi int) {
		d := dst[lo:hi]
		n := len(d) &^ (k.lanes - 1)
		if n > 0 {
			fn(d[:n], a[lo:lo+n], b[lo:lo+n])
		}
		if n < len(d) {
			tail(d[n:], a[lo+n:hi], b[lo+n:hi])
		}
	})
}
