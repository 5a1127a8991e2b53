package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Layout of the policy kernels' parameter block p *[208]float32 (ppo.policyArgs): 13 blocks of
// 16 float32. Blocks 0-7 hold the constants, each replicated 16 times (so both ISAs read them
// as vector memory operands); blocks 8-12 receive the per-lane partial sums.
const (
	pClo = iota
	pChi
	pELo
	pEHi
	pRMin
	pRMax
	pDual
	pGW
	pSumT   // sum T*m
	pSumLP  // sum lp*m
	pSumKL  // sum (lp-old)*m
	pClipHi // sum m where p1 < p2
	pClipLo // sum m where A < 0 and max(p1, p2) > -A*dual
	pBlocks
)

// policyFamily emits the per-token kernel of ppo.PolicyLoss for the Default (dual-clip) loss
// in token-level ratio mode (policy_amd64.s).
func policyFamily() {
	emitConstants()
	emitXConstants()
	for _, a := range []isa{avx512, avx2} {
		for _, grad := range []string{"", "Grad", "GradAcc"} {
			for _, ltm := range []bool{false, true} {
				policyKernel(a, grad, ltm)
			}
		}
	}
}

// Extra predicates: not-less-than and not-greater-than, true on NaN.
const (
	nltUQ = 0x15
	ngtUQ = 0x1A
)

// policyKernel: func(gr, old, lp, adv, m, ltm []float32, p *[208]float32). For every token
// with m != 0 (NaN included) it computes, with x = lp - old and na = -adv,
//
//	r  = exp(x) for |x| <= 20, else rMin / rMax;  dr = r inside, 0 outside (NaN: NaN)
//	c  = exp(x) for clo <= x <= chi, else eLo / eHi; dc = c inside, else 0
//	p1 = na*r, p2 = na*c, hi = max(p1, p2), dhi = the derivative of the larger (half each on a tie)
//	A < 0: T = min(hi, na*dual) with derivative dhi, 0, or dhi/2 on a tie
//
// T is multiplied by ltm (LTM variants); the lane sums of T*m, lp*m, x*m and of m where the
// clips are active go to p's blocks 8-12; the Grad variants write gw*m*ltm*dT to gr (0 where
// m == 0), GradAcc adds it (gr untouched where m == 0). len(m) is a multiple of the lanes.
func policyKernel(a isa, grad string, ltm bool) {
	g := &kern{isa: a}
	name := "policy" + grad
	if grad == "" {
		name += "Loss"
	}
	if ltm {
		name += "LTM"
	}
	name += a.name
	TEXT(name, NOSPLIT, "func(gr, old, lp, adv, m, ltm []float32, p *[208]float32)")
	Pragma("noescape")
	Doc(name+" is the per-token Vanilla (dual-clip) policy loss (see internal/asmgen/policy.go); len(m) must be",
		fmt.Sprintf("a multiple of %d and the other slices at least as long.", a.lanes))
	var grp, lwp Register
	if grad != "" {
		grp = Load(Param("gr").Base(), GP64())
	}
	op := Load(Param("old").Base(), GP64())
	lpp := Load(Param("lp").Base(), GP64())
	ap := Load(Param("adv").Base(), GP64())
	mp := Load(Param("m").Base(), GP64())
	if ltm {
		lwp = Load(Param("ltm").Base(), GP64())
	}
	n := Load(Param("m").Len(), GP64())
	pp := Load(Param("p"), GP64())
	prm := func(i int) Mem { return mem(pp, 64*i) }
	var acc [5]VecVirtual
	zero := g.vec()
	VXORPS(zero, zero, zero)
	if a.avx512 {
		// The constants stay in memory (xconst, 64-byte entries): keeping the exp constants in
		// registers too leaves avo's allocator short of zmm registers.
		for i := range acc {
			acc[i] = g.vec()
			VXORPS(acc[i], acc[i], acc[i])
		}
	} else {
		for i := range acc {
			VMOVUPS(zero, prm(pSumT+i))
		}
	}
	addAcc := func(i int, v VecVirtual) {
		if a.avx512 {
			VADDPS(v, acc[i], acc[i])
			return
		}
		VADDPS(prm(pSumT+i), v, v)
		VMOVUPS(v, prm(pSumT+i))
	}
	body := func(off int) {
		at := func(p Register) Mem { return mem(p, off*4) }
		mv := g.vec()
		VMOVUPS(at(mp), mv)
		// Masks are recomputed where used rather than held: AVX-512 has only 7 mask registers.
		nzm := func() Op { return g.cmp(neqUQ, mv, zero) }
		nz := nzm()
		lpv := g.vec()
		VMOVUPS(at(lpp), lpv)
		x := g.vec()
		VSUBPS(at(op), lpv, x) // x = lp - old
		VMULPS(mv, lpv, lpv)
		addAcc(1, g.zero(nz, lpv))
		t := g.vec()
		VMULPS(mv, x, t)
		addAcc(2, g.zero(nz, t))

		// Ratio and clipped ratio.
		re := g.exp(g.clamp(x, g.c(xM20), g.c(xP20)))
		in20 := g.and(g.cmp(nltUQ, x, g.c(xM20)), g.cmp(ngtUQ, x, g.c(xP20)))
		dr := g.zero(in20, re)
		r := g.blend(g.cmp(ltOQ, x, g.c(xM20)), prm(pRMin), re)
		r = g.blend(g.cmp(gtOQ, x, g.c(xP20)), prm(pRMax), r)
		inr := g.and(g.cmp(geOQ, x, prm(pClo)), g.cmp(leOQ, x, prm(pChi)))
		dc := g.zero(inr, re)
		c := g.blend(g.cmp(ltOQ, x, prm(pClo)), prm(pELo), re)
		c = g.blend(g.cmp(gtOQ, x, prm(pChi)), prm(pEHi), c)

		na := g.vec()
		VMOVUPS(at(ap), na)
		VXORPS(g.c(xSign), na, na) // -A, exactly
		p1, p2, d1, d2 := g.vec(), g.vec(), g.vec(), g.vec()
		VMULPS(r, na, p1)
		VMULPS(c, na, p2)
		VMULPS(dr, na, d1)
		VMULPS(dc, na, d2)
		hi := g.vec()
		VMAXPS(p1, p2, hi) // p1 on a tie or NaN
		// Clip-higher indicator: p1 < p2.
		lt := g.cmp(ltOQ, p1, p2)
		addAcc(3, g.zero(g.and(nzm(), lt), mv))
		s := g.vec()
		VADDPS(d2, d1, s)
		sh := g.vec()
		VMULPS(g.c(xHalf), s, sh)
		dhi := g.blend(g.cmp(eqOQ, p1, p2), sh, s)
		dhi = g.blend(g.cmp(gtOQ, p1, p2), d1, dhi)
		dhi = g.blend(lt, d2, dhi)

		// Dual clip for A < 0 (-A > 0).
		p3 := g.vec()
		VMULPS(prm(pDual), na, p3)
		negm := func() Op { return g.cmp(gtOQ, na, zero) }
		overm := func() Op { return g.cmp(gtOQ, hi, p3) }
		addAcc(4, g.zero(g.and(nzm(), g.and(negm(), overm())), mv))
		T := g.blend(g.and(negm(), overm()), p3, hi)
		if ltm {
			VMULPS(at(lwp), T, T)
		}
		VMULPS(mv, T, T)
		addAcc(0, g.zero(nzm(), T))
		if grad == "" {
			return
		}
		dd := g.vec()
		VMULPS(g.c(xHalf), dhi, dd)
		dd = g.blend(g.cmp(ltOQ, hi, p3), dhi, dd)
		dd = g.blend(overm(), g.c(xZero), dd)
		d := g.blend(negm(), dd, dhi)
		gv := g.vec()
		VMULPS(prm(pGW), mv, gv) // gw*m
		if ltm {
			VMULPS(at(lwp), gv, gv)
		}
		VMULPS(d, gv, gv)
		if grad == "Grad" {
			VMOVUPS(g.zero(nzm(), gv), at(grp))
			return
		}
		old := g.vec()
		VMOVUPS(at(grp), old)
		VADDPS(gv, old, gv)
		VMOVUPS(g.blend(nzm(), gv, old), at(grp))
	}
	ptrs := []Register{op, lpp, ap, mp}
	if grad != "" {
		ptrs = append(ptrs, grp)
	}
	if ltm {
		ptrs = append(ptrs, lwp)
	}
	loop(name, a.lanes, 1, n, ptrs, body)
	if a.avx512 {
		for i := range acc {
			VMOVUPS(acc[i], prm(pSumT+i))
		}
	}
	VZEROUPPER()
	RET()
}
