package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// attentionFamily emits the row kernels of tensor's CPU attention (attention_amd64.s): the
// online-softmax step of the forward and the probability and score-gradient step of the
// backward, for AVX-512F (16 lanes) and AVX2 with FMA (8 lanes). The products around them run
// on internal/gemm's micro-kernels; these kernels are the exp between the products. exp is the
// log-prob family's (exp in main.go: degree-7 polynomial, valid for arguments in [-87, 0.34]),
// its argument clamped below at -87.
func attentionFamily() {
	emitConstants()
	for _, a := range []isa{avx512, avx2} {
		softmaxRowKernel(a)
		attnBwdRowKernel(a)
	}
}

// attnKeep loads the constants of exp into registers: all of them on AVX-512 (32 registers),
// the clamp and the rounding constant on AVX2, whose other constants stay memory operands.
func attnKeep(g *kern) {
	if g.avx512 {
		g.keep(append([]int{cMinus87}, expKeep...)...)
	} else {
		g.keep(cMinus87, cMagic)
	}
}

// softmaxRowKernel: func(x []float32, m, tau float32) (mx, sum float32): with r the maximum of
// x, mx = r when r > m + tau and mx = m otherwise; then x[i] = exp(max(x[i]-mx, -87)) in place
// and sum = Σ x[i], per lane in float32 and reduced in a fixed order. The maximum ignores NaN
// elements (their exp is NaN, so the sum is NaN).
//
// The threshold tau is the lazy rescaling of the online softmax: the running maximum, and with it
// the accumulated output, changes only when a tile's maximum passes it by more than tau, so the
// exps stay below e^tau and most tiles need no rescale of the output rows.
func softmaxRowKernel(a isa) {
	g := &kern{isa: a}
	name := "attnSoftmax" + a.name
	TEXT(name, NOSPLIT, "func(x []float32, m, tau float32) (mx, sum float32)")
	Pragma("noescape")
	Doc(name+" is one step of the online softmax over a tile of scores: mx is the maximum r of x",
		"when r > m + tau, else m; x[i] becomes exp(x[i] - mx) (the argument clamped at -87), and sum is",
		fmt.Sprintf("their sum. len(x) must be a multiple of %d.", a.lanes))
	base := Load(Param("x").Base(), GP64())
	n0 := Load(Param("x").Len(), GP64())
	attnKeep(g)
	const u = 4
	mx := make([]VecVirtual, u)
	for j := range mx {
		mx[j] = a.bcast(cNegInf)
	}
	ptr, n := GP64(), GP64()
	MOVQ(base, ptr)
	MOVQ(n0, n)
	loop(name+"_max", a.lanes, u, n, []Register{ptr}, func(off int) {
		j := off / a.lanes
		x := g.vec()
		VMOVUPS(Mem{Base: ptr, Disp: 4 * off}, x)
		VMAXPS(mx[j], x, mx[j]) // a NaN x returns mx[j] (the second source)
	})
	VMAXPS(mx[1], mx[0], mx[0])
	VMAXPS(mx[3], mx[2], mx[2])
	VMAXPS(mx[2], mx[0], mx[0])
	r := g.hreduce(mx[0], false)
	mOld := Load(Param("m"), XMM())
	t := Load(Param("tau"), XMM())
	VADDSS(mOld, t, t)
	gt := XMM()
	VCMPSS(U8(gtOQ), t, r, gt) // r > m + tau
	res := XMM()
	VBLENDVPS(gt, r, mOld, res) // gt ? r : m
	Store(res, Return("mx"))
	m := g.vec()
	VBROADCASTSS(res, m)
	s := make([]VecVirtual, u)
	for j := range s {
		s[j] = g.vec()
		VXORPS(s[j], s[j], s[j])
	}
	MOVQ(base, ptr)
	MOVQ(n0, n)
	loop(name+"_exp", a.lanes, u, n, []Register{ptr}, func(off int) {
		j := off / a.lanes
		x := g.vec()
		VMOVUPS(Mem{Base: ptr, Disp: 4 * off}, x)
		VSUBPS(m, x, x)
		VMAXPS(x, g.c(cMinus87), x) // NaN-propagating: NaN u is the second source
		e := g.exp(x)
		VMOVUPS(e, Mem{Base: ptr, Disp: 4 * off})
		VADDPS(e, s[j], s[j])
	})
	VADDPS(s[1], s[0], s[0])
	VADDPS(s[3], s[2], s[2])
	VADDPS(s[2], s[0], s[0])
	Store(g.hreduce(s[0], true), Return("sum"))
	VZEROUPPER()
	RET()
}

// attnBwdRowKernel: func(p, dp, lse, dlt []float32): for every i, e = exp(max(p[i]-lse[i], -87)),
// p[i] = e and dp[i] = e·(dp[i]-dlt[i]): a row of the backward's transposed tiles, one key
// against a block of queries, turning scores into probabilities and dO·V into the score
// gradient. All four slices have len(p) elements, a multiple of the lane count.
func attnBwdRowKernel(a isa) {
	g := &kern{isa: a}
	name := "attnBwd" + a.name
	TEXT(name, NOSPLIT, "func(p, dp, lse, dlt []float32)")
	Pragma("noescape")
	Doc(name+" writes p[i] = exp(p[i] - lse[i]) (the argument clamped at -87) and dp[i] = p[i]·(dp[i] -",
		fmt.Sprintf("dlt[i]) with the new p[i]; the slices have len(p) elements, a multiple of %d.", a.lanes))
	pp := Load(Param("p").Base(), GP64())
	n := Load(Param("p").Len(), GP64())
	dp := Load(Param("dp").Base(), GP64())
	lse := Load(Param("lse").Base(), GP64())
	dlt := Load(Param("dlt").Base(), GP64())
	attnKeep(g)
	u := 4
	if !a.avx512 {
		u = 2 // 16 registers: two exps in flight
	}
	loop(name, a.lanes, u, n, []Register{pp, dp, lse, dlt}, func(off int) {
		x := g.vec()
		VMOVUPS(Mem{Base: pp, Disp: 4 * off}, x)
		VSUBPS(Mem{Base: lse, Disp: 4 * off}, x, x)
		VMAXPS(x, g.c(cMinus87), x)
		e := g.exp(x)
		VMOVUPS(e, Mem{Base: pp, Disp: 4 * off})
		d := g.vec()
		VMOVUPS(Mem{Base: dp, Disp: 4 * off}, d)
		VSUBPS(Mem{Base: dlt, Disp: 4 * off}, d, d)
		VMULPS(e, d, d)
		VMOVUPS(d, Mem{Base: dp, Disp: 4 * off})
	})
	VZEROUPPER()
	RET()
}
