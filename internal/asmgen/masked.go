package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// maskedFamily emits the masked reductions of internal/hostops (masked_amd64.s). The sums
// are float64: each float32 product is widened (exactly) and added into per-lane float64
// accumulators, which are combined in a fixed order at the end.
func maskedFamily() {
	for _, a := range []isa{avx512, avx2} {
		maskedSumKernel(a, false)
		maskedSumKernel(a, true)
		whitenKernel(a)
	}
}

// widenAdd adds the float32 lanes of p, widened to float64, into lo (first half) and hi.
func (g *kern) widenAdd(p VecVirtual, lo, hi VecVirtual) {
	if g.avx512 {
		l, h := ZMM(), ZMM()
		VCVTPS2PD(p.AsY(), l)
		y := YMM()
		VEXTRACTF64X4(U8(1), p, y)
		VCVTPS2PD(y, h)
		VADDPD(l, lo, lo)
		VADDPD(h, hi, hi)
		return
	}
	l, h := YMM(), YMM()
	VCVTPS2PD(p.AsX(), l)
	x := XMM()
	VEXTRACTF128(U8(1), p, x)
	VCVTPS2PD(x, h)
	VADDPD(l, lo, lo)
	VADDPD(h, hi, hi)
}

// widenAddMem adds the float32 vector at m, widened, into lo and hi.
func (g *kern) widenAddMem(m Mem, lo, hi VecVirtual) {
	half := g.lanes / 2 * 4
	l, h := g.vec(), g.vec()
	VCVTPS2PD(m, l)
	VCVTPS2PD(m.Offset(half), h)
	VADDPD(l, lo, lo)
	VADDPD(h, hi, hi)
}

// hsumPD reduces the float64 lanes of v (zmm or ymm) into lane 0 of an xmm, in a fixed order.
func (g *kern) hsumPD(v VecVirtual) VecVirtual {
	y := v
	if g.avx512 {
		hi := YMM()
		VEXTRACTF64X4(U8(1), v, hi)
		VADDPD(hi, v.AsY(), hi)
		y = hi
	}
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	VADDPD(x, y.AsX(), x)
	x2 := XMM()
	VUNPCKHPD(x, x, x2)
	VADDSD(x2, x, x)
	return x
}

// maskedSumKernel: func(v, m []float32) (sum, count float64) with sum = sum(v*m where m != 0)
// and count = sum(m); or, with sq, func(v, m []float32, mean float32) float64 =
// sum((v-mean)*(v-mean)*m where m != 0). Products in float32 as the reference rounds them,
// sums in float64.
func maskedSumKernel(a isa, sq bool) {
	g := &kern{isa: a}
	name := "maskedSum" + a.name
	if sq {
		name = "maskedSqDev" + a.name
		TEXT(name, NOSPLIT, "func(v, m []float32, mean float32) float64")
		Doc(name+" returns the float64 sum of float32 (v-mean)*(v-mean)*m over m != 0 (NaN m included);",
			fmt.Sprintf("len(m) must be a multiple of %d and len(v) >= len(m).", a.lanes))
	} else {
		TEXT(name, NOSPLIT, "func(v, m []float32) (sum, count float64)")
		Doc(name+" returns the float64 sums of float32 v*m over m != 0 (NaN m included) and of m;",
			fmt.Sprintf("len(m) must be a multiple of %d and len(v) >= len(m).", a.lanes))
	}
	Pragma("noescape")
	vp := Load(Param("v").Base(), GP64())
	mp := Load(Param("m").Base(), GP64())
	n := Load(Param("m").Len(), GP64())
	var mean VecVirtual
	if sq {
		mean = g.bcastArg("mean")
	}
	zero := g.vec()
	VXORPS(zero, zero, zero)
	const u = 2
	var sLo, sHi, cLo, cHi [u]VecVirtual
	for j := 0; j < u; j++ {
		sLo[j], sHi[j] = g.vec(), g.vec()
		VXORPS(sLo[j], sLo[j], sLo[j])
		VXORPS(sHi[j], sHi[j], sHi[j])
		if !sq {
			cLo[j], cHi[j] = g.vec(), g.vec()
			VXORPS(cLo[j], cLo[j], cLo[j])
			VXORPS(cHi[j], cHi[j], cHi[j])
		}
	}
	body := func(off int) {
		j := off / a.lanes % u
		mv := g.vec()
		VMOVUPS(mem(mp, off*4), mv)
		nz := g.cmp(neqUQ, mv, zero)
		x := g.vec()
		VMOVUPS(mem(vp, off*4), x)
		if sq {
			VSUBPS(mean, x, x)
			VMULPS(x, x, x)
		}
		VMULPS(mv, x, x)
		p := g.zero(nz, x)
		g.widenAdd(p, sLo[j], sHi[j])
		if !sq {
			g.widenAddMem(mem(mp, off*4), cLo[j], cHi[j])
		}
	}
	loop(name, a.lanes, u, n, []Register{vp, mp}, body)
	combine := func(lo, hi [u]VecVirtual) VecVirtual {
		VADDPD(hi[0], lo[0], lo[0])
		VADDPD(hi[1], lo[1], lo[1])
		VADDPD(lo[1], lo[0], lo[0])
		return g.hsumPD(lo[0])
	}
	if sq {
		Store(combine(sLo, sHi), ReturnIndex(0))
	} else {
		Store(combine(sLo, sHi), Return("sum"))
		Store(combine(cLo, cHi), Return("count"))
	}
	VZEROUPPER()
	RET()
}

// whitenKernel: func(dst, v []float32, mean, scale float32) writes (v-mean)*scale.
func whitenKernel(a isa) {
	g := &kern{isa: a}
	name := "whiten" + a.name
	TEXT(name, NOSPLIT, "func(dst, v []float32, mean, scale float32)")
	Pragma("noescape")
	Doc(name+" writes (v-mean)*scale into dst (float32, no fused multiply-add); len(dst) must be a", fmt.Sprintf("multiple of %d and len(v) >= len(dst).", a.lanes))
	dp := Load(Param("dst").Base(), GP64())
	vp := Load(Param("v").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	mean, scale := g.bcastArg("mean"), g.bcastArg("scale")
	loop(name, a.lanes, a.unroll, n, []Register{dp, vp}, func(off int) {
		x := g.vec()
		VMOVUPS(mem(vp, off*4), x)
		VSUBPS(mean, x, x)
		VMULPS(scale, x, x)
		VMOVUPS(x, mem(dp, off*4))
	})
	VZEROUPPER()
	RET()
}
