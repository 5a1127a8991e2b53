package hostops

import (
	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// maskedSIMD is one vector implementation of the masked reductions (masked_amd64.go). The
// kernels take whole vectors only; the methods below finish the tails in Go.
type maskedSIMD struct {
	lanes  int
	sum    func(v, m []float32) (sum, count float64)
	sqDev  func(v, m []float32, mean float32) float64
	whiten func(dst, v []float32, mean, scale float32)
}

// maskedImpls lists the implementations this build can run on this CPU, best first; the
// pure-Go one ("go", nil kernels) is always last.
var maskedImpls = dispatch.New(simdMaskedImpls()...)

// MaskedImpls names the implementations of the masked reductions this build and CPU can run,
// best first; "go" (the pure-Go reference) is last. For tests and benchmarks.
func MaskedImpls() []string { return maskedImpls.Names() }

// UseMaskedImpl makes the masked reductions use the named implementation until the returned
// function restores the default. For tests and benchmarks; not safe in parallel tests.
func UseMaskedImpl(name string) (restore func()) { return maskedImpls.Use(name) }

// maskedChunk is the fixed chunk of the vectorized reductions: partial float64 sums per chunk
// are combined in chunk order, so the result depends only on the length, never on GOMAXPROCS.
// A [64, 1024] batch is one chunk and runs on the calling goroutine.
const maskedChunk = 1 << 17

// chunked runs fn over [0, n) in maskedChunk pieces (in parallel when there are several) and
// returns the per-chunk results in order.
func chunked[T any](n int, fn func(lo, hi int) T) []T {
	chunks := max(1, (n+maskedChunk-1)/maskedChunk)
	out := make([]T, chunks)
	if chunks == 1 {
		out[0] = fn(0, n)
		return out
	}
	parallel.For(chunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			out[c] = fn(c*maskedChunk, min((c+1)*maskedChunk, n))
		}
	})
	return out
}

// sumSIMD is MaskedSum: vector lanes in float64, chunk results added in order, tails in Go.
func (k *maskedSIMD) sumSIMD(v, m []float32) (sum, count float64) {
	v = v[:len(m)]
	for _, p := range chunked(len(m), func(lo, hi int) [2]float64 {
		n := (hi - lo) &^ (k.lanes - 1)
		var s, c float64
		if n > 0 {
			s, c = k.sum(v[lo:lo+n], m[lo:lo+n])
		}
		ts, tc := maskedSumGo(v[lo+n:hi], m[lo+n:hi])
		return [2]float64{s + ts, c + tc}
	}) {
		sum += p[0]
		count += p[1]
	}
	return sum, count
}

// sqDevSIMD returns sum((v-mean)^2 * m) over m != 0, like sumSIMD.
func (k *maskedSIMD) sqDevSIMD(v, m []float32, mean float32) float64 {
	v = v[:len(m)]
	var sum float64
	for _, p := range chunked(len(m), func(lo, hi int) float64 {
		n := (hi - lo) &^ (k.lanes - 1)
		var s float64
		if n > 0 {
			s = k.sqDev(v[lo:lo+n], m[lo:lo+n], mean)
		}
		return s + sqDevGo(v[lo+n:hi], m[lo+n:hi], mean)
	}) {
		sum += p
	}
	return sum
}

// whitenSIMD writes (v-mean)*scale, bit-identical to the Go loop.
func (k *maskedSIMD) whitenSIMD(dst, v []float32, mean, scale float32) {
	v = v[:len(dst)]
	parallel.For(len(dst), maskedChunk, func(lo, hi int) {
		n := (hi - lo) &^ (k.lanes - 1)
		if n > 0 {
			k.whiten(dst[lo:lo+n], v[lo:lo+n], mean, scale)
		}
		for i := lo + n; i < hi; i++ {
			dst[i] = (v[i] - mean) * scale
		}
	})
}
