package vlm

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/hostops"
)

// modelSIMD says whether Model's own forward, backward and sampling use the AVX2 kernels for
// attention, softmax and GELU. HostOps never does: it is the pure-Go reference (same operation
// order, no fused multiply-adds) that the CUDA kernels reproduce bit for bit. Tests set it to
// false to compare Model with HostOps bitwise.
var modelSIMD = hasKernel

func isF32[F Float]() bool {
	var z F
	return unsafe.Sizeof(z) == 4
}

// f32p is &x[0] as a *float32; only for F = float32.
func f32p[F Float](x []F) *float32 { return (*float32)(unsafe.Pointer(&x[0])) }

// ceil8 rounds n up to a multiple of 8, the width of the AVX2 kernels.
func ceil8(n int) int { return (n + 7) &^ 7 }

// axpy adds Σ_{p<k} a[p]·b[p·ldb : p·ldb+n] to c[:n]; each column sums over p in order. With
// simd (float32) the columns up to a multiple of 8 go through the AVX2 kernel (fused
// multiply-adds), the rest through the same loop as without.
func axpy[F Float](simd bool, k int, a, b []F, ldb int, c []F, n int) {
	if k <= 0 || n <= 0 {
		return
	}
	_, _, _ = a[k-1], b[(k-1)*ldb+n-1], c[n-1] // the kernel reads and writes exactly these ranges
	j0 := 0
	if simd && hasKernel && isF32[F]() && n >= 8 {
		j0 = n &^ 7
		axpyRows(k, f32p(a), f32p(b), ldb, f32p(c), j0)
		if j0 == n {
			return
		}
	}
	for p := range k {
		ap, br := a[p], b[p*ldb:p*ldb+n]
		for j := j0; j < n; j++ {
			c[j] += ap * br[j]
		}
	}
}

// softmax turns the scores scale·sc[:lim] into probabilities in place: exp(x − max), divided by
// their sum. Without simd the arithmetic is the reference's (scale, then exp, then the sum in
// order). With simd, sc must have room for ceil8(lim) values; the AVX2 kernel sums in 8 lanes.
func softmax[F Float](simd bool, sc []F, lim int, scale F) {
	if simd && hasKernel && isF32[F]() {
		w := ceil8(lim)
		for j := lim; j < w; j++ {
			sc[j] = F(math.Inf(-1))
		}
		softmaxRow(w, f32p(sc), float32(scale))
		return
	}
	mx := F(math.Inf(-1))
	for j := range lim {
		sc[j] *= scale
		mx = max(mx, sc[j])
	}
	for j := range lim {
		sc[j] = hostops.Exp(sc[j] - mx)
	}
	var sum F
	for _, v := range sc[:lim] {
		sum += v
	}
	inv := 1 / sum
	for j := range lim {
		sc[j] *= inv
	}
}

// geluSpan and geluBackSpan are gelu and geluBack on one span: the AVX2 kernel on its first
// multiple of 8 values when simd, the reference loop on the rest.
func geluSpan[F Float](simd bool, u, a []F) {
	i0 := 0
	if simd && hasKernel && isF32[F]() && len(u) >= 8 {
		i0 = len(u) &^ 7
		geluFwd(i0, f32p(u), f32p(a[:len(u)]))
	}
	for i := i0; i < len(u); i++ {
		a[i] = u[i] * sigmoid(geluK*u[i])
	}
}

func geluBackSpan[F Float](simd bool, u, da []F) {
	i0 := 0
	if simd && hasKernel && isF32[F]() && len(u) >= 8 {
		i0 = len(u) &^ 7
		geluBwd(i0, f32p(u), f32p(da[:len(u)]))
	}
	for i := i0; i < len(u); i++ {
		s := sigmoid(geluK * u[i])
		da[i] *= s + geluK*u[i]*s*(1-s)
	}
}
