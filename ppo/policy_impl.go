package ppo

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
)

// policyFn is a vector kernel of the Vanilla loss (see internal/asmgen/policy.go).
type policyFn func(gr, old, lp, adv, m, ltm []float32, p *[208]float32)

// policySIMD is one vector implementation of the Vanilla policy loss per token: fn[g][l] with
// g = no gradient, gradient stored, gradient accumulated and l = without / with TokenMask.
type policySIMD struct {
	lanes int
	fn    [3][2]policyFn
}

// policyImpls lists the implementations this build can run on this CPU, best first; the
// pure-Go one ("go", nil kernels) is always last.
var policyImpls = dispatch.New(simdPolicyImpls()...)

// policyArgs is the kernels' parameter block (*[208]float32 in assembly): the constants
// replicated across 16 lanes, then the per-lane partial sums the kernel writes.
type policyArgs struct {
	c   [8][16]float32 // clo, chi, eLo, eHi, rMin, rMax, dual, gw
	acc [5][16]float32 // T*m, lp*m, (lp-old)*m, m where clipped high, m where dual-clipped
}

// policyChunk bounds the tokens per kernel call: each lane then adds at most 32 (AVX-512) or
// 64 (AVX2) float32 terms before its partial sum is added to the row's float64 totals.
const policyChunk = 512

// simdOK reports whether the vector kernels apply: float32, the Vanilla loss, and clip bounds
// inside the ratio clamp (so the clipped ratio shares the ratio's exp, as the Go kernel does).
func (k *policyConsts[F]) simdOK() bool {
	return k.typ == Vanilla && k.clo >= -logRatioClamp && k.chi <= logRatioClamp
}

func sub(x []float32, lo, hi int) []float32 {
	if x == nil {
		return nil
	}
	return x[lo:hi]
}

// policyRowSIMD is policyRowKernel for the Vanilla loss with the vector kernels s on whole
// vectors and the Go kernel on the tail. Lane sums are added in lane order, chunk by chunk.
func policyRowSIMD(s *policySIMD, k *policyConsts[float32], gr, old, lp, adv, m, ltm []float32, w float32) policyRow {
	var a policyArgs
	for l := range 16 {
		a.c[0][l], a.c[1][l], a.c[2][l], a.c[3][l] = k.clo, k.chi, k.eLo, k.eHi
		a.c[4][l], a.c[5][l], a.c[6][l], a.c[7][l] = k.rMin, k.rMax, k.dual, k.scale*w
	}
	g := 0
	if gr != nil {
		g = 1
		if k.acc {
			g = 2
		}
	}
	l := 0
	if ltm != nil {
		l = 1
	}
	fn := s.fn[g][l]
	p := (*[208]float32)(unsafe.Pointer(&a))
	n := len(m)
	nv := n &^ (s.lanes - 1)
	var st policyRow
	for lo := 0; lo < nv; lo += policyChunk {
		hi := min(lo+policyChunk, nv)
		fn(sub(gr, lo, hi), old[lo:hi], lp[lo:hi], adv[lo:hi], m[lo:hi], sub(ltm, lo, hi), p)
		for j := range s.lanes {
			st.sumT += float64(a.acc[0][j])
			st.sumNegLP -= float64(a.acc[1][j])
			st.sumNegKL -= float64(a.acc[2][j])
			st.clipHi += float64(a.acc[3][j])
			st.clipLo += float64(a.acc[4][j])
		}
	}
	if nv < n {
		t := policyRowKernel(k, sub(gr, nv, n), old[nv:n], lp[nv:n], adv[nv:n], m[nv:n], sub(ltm, nv, n), w)
		st.sumT += t.sumT
		st.sumNegLP += t.sumNegLP
		st.sumNegKL += t.sumNegKL
		st.clipHi += t.clipHi
		st.clipLo += t.clipLo
	}
	return st
}
