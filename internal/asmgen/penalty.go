package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/reg"
)

// penaltyFamily emits the elementwise kernels of package divergence (penalty_amd64.s):
// low_var_kl, its gradient and the perception score, each func(dst, a, b []float32) over
// d = b - a, whole vectors only (len(dst) a multiple of the lanes; a and b at least as long).
func penaltyFamily() {
	emitConstants()
	emitXConstants()
	for _, a := range []isa{avx512, avx2} {
		for _, op := range []string{"lowVarKL", "lowVarKLGrad", "perception"} {
			penaltyKernel(a, op)
		}
	}
}

func penaltyKernel(a isa, op string) {
	g := &kern{isa: a}
	name := op + a.name
	TEXT(name, NOSPLIT, "func(dst, a, b []float32)")
	Pragma("noescape")
	switch op {
	case "lowVarKL":
		Doc(name+" writes clamp(exp(x)-x-1, -10, 10), x = clamp(b-a, -20, 20); len(dst) must be a multiple of", fmt.Sprintf("%d.", a.lanes))
	case "lowVarKLGrad":
		Doc(name+" writes 1-exp(x), x = clamp(b-a, -20, 20), or 0 where either clamp of low_var_kl is active", fmt.Sprintf("(or b-a is NaN); len(dst) must be a multiple of %d.", a.lanes))
	case "perception":
		Doc(name+" writes clamp(exp(x)-x-1, 0, 10), x = clamp(b-a, -20, 20); len(dst) must be a multiple of", fmt.Sprintf("%d.", a.lanes))
	}
	dp := Load(Param("dst").Base(), GP64())
	ap := Load(Param("a").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	lo := xM10
	if op == "perception" {
		lo = xZero
	}
	if a.avx512 {
		g.keep(expKeep...)
		g.keep(xM20, xP20, lo, xP10)
	} else {
		g.keep(cMagic, xM20, xP20)
	}
	body := func(off int) {
		d0 := g.vec()
		VMOVUPS(mem(bp, off*4), d0)
		VSUBPS(mem(ap, off*4), d0, d0) // d0 = b - a
		x := g.clamp(d0, g.c(xM20), g.c(xP20))
		e := g.exp(x)
		y := g.vec()
		VSUBPS(x, e, y)         // e - x
		VSUBPS(g.c(cOne), y, y) // (e - x) - 1
		var out VecVirtual
		if op == "lowVarKLGrad" {
			yc := g.clamp(y, g.c(xM10), g.c(xP10))
			in := g.and(g.cmp(eqOQ, x, d0), g.cmp(eqOQ, yc, y))
			one := g.vec()
			g.mov(g.c(cOne), one)
			VSUBPS(e, one, one) // 1 - e
			out = g.zero(in, one)
		} else {
			out = g.clamp(y, g.c(lo), g.c(xP10))
		}
		VMOVUPS(out, mem(dp, off*4))
	}
	loop(name, a.lanes, 2, n, []Register{dp, ap, bp}, body)
	VZEROUPPER()
	RET()
}
