package main

import (
	"fmt"
	"math"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// activationFamily emits the activations of tensor's host ops (activation_amd64.s): x·σ(βx)
// (SiLU, QuickGELU), its derivative, SwiGLU and its backward, GELU (its erfc fit) and GELUTanh
// (x·σ(2u)) and their derivatives, for AVX-512F (16 lanes) and AVX2 (8 lanes), whole vectors
// only; each also on bfloat16 (widened as loaded, rounded once as stored).
//
// They reproduce the Go loops of tensor/activation_cpu.go and activation_gelu.go bit for bit
// (the products and sums in the Go code's order): the exp is
// hostops.Exp32's own arithmetic (x·log2e + 1/2 floored, the two-part ln2 reduction, the
// degree-7 Taylor polynomial in Horner form, times 2^k built from its exponent bits) with
// separate multiplies and adds (no FMA: the Go code rounds each product explicitly), and
// the quotients are VDIVPS, correctly rounded like DIVSS. Exp32 takes math.Exp above 88; the
// kernels cannot, so each returns whether a lane's exp argument exceeded 88 and the caller
// redoes those elements in Go (only inputs below −88/β, where σ underflows; GELUTanh's below
// about −10.03; GELU's exp arguments never pass 0).
func activationFamily() {
	emitActConstants()
	for _, a := range []isa{avx512, avx2} {
		for _, name := range actKernelNames {
			actKernel(a, name, false)
		}
		for _, name := range actKernelNames[:4] {
			actKernel(a, name, true)
		}
	}
	// The GELUs' bfloat16 kernels come last, so that adding them left the others in place.
	for _, a := range []isa{avx512, avx2} {
		for _, name := range actKernelNames[4:] {
			actKernel(a, name, true)
		}
	}
}

// The kernels, in the order they are emitted; actSig gives each one's outputs, inputs and
// whether it takes β.
var actKernelNames = []string{"actFwd", "actBwd", "swiGLU", "swiGLUBwd", "gelu", "geluBwd", "geluTanh", "geluTanhBwd"}

var actSig = map[string]struct {
	params []string
	nOut   int
	beta   bool
}{
	"actFwd":      {[]string{"y", "x"}, 1, true},
	"actBwd":      {[]string{"dx", "x", "dy"}, 1, true},
	"swiGLU":      {[]string{"y", "gate", "up"}, 1, false},
	"swiGLUBwd":   {[]string{"dgate", "dup", "gate", "up", "dy"}, 2, false},
	"gelu":        {[]string{"y", "x"}, 1, false},
	"geluBwd":     {[]string{"dx", "x", "dy"}, 1, false},
	"geluTanh":    {[]string{"y", "x"}, 1, false},
	"geluTanhBwd": {[]string{"dx", "x", "dy"}, 1, false},
}

// Entries of the actconst table (64 bytes each, so AVX-512 can use them as memory operands).
const (
	aLog2e = iota
	aHalf
	aLn2Hi
	aLn2Lo
	aC7
	aC6
	aC5
	aC4
	aC3
	aOne
	aExpMin
	aExpMax
	aBias // int32 127
	aSign // int32 0x80000000
	nKeep // AVX-512 keeps the constants above in registers; the ones below are memory operands
	aAbs  // int32 0x7fffffff
	aTwo
	aNegHalf
	aNegInvSqrt2
	aInvSqrt2Pi
	aK2   // 2·√(2/π)
	aK3   // 0.044715
	aK3x3 // 3·0.044715
	aP0   // erfcP[0]; aP0+i is erfcP[i]
	_
	_
	_
	_
	_
	_
	_
	_
	aP9
	aI7fff
	aIOne
	aQuiet
	nAct
)

var actTable Mem

// emitActConstants writes hostops.Exp32's constants, each rounded once from its exact value
// to float32 as the Go compiler rounds them (f32bits would round through float64).
func emitActConstants() {
	vals := [nAct]uint32{
		aLog2e:  math.Float32bits(1.44269504088896341),
		aHalf:   math.Float32bits(0.5),
		aLn2Hi:  math.Float32bits(0.693359375),
		aLn2Lo:  math.Float32bits(-2.12194440e-4),
		aC7:     math.Float32bits(1.0 / 5040),
		aC6:     math.Float32bits(1.0 / 720),
		aC5:     math.Float32bits(1.0 / 120),
		aC4:     math.Float32bits(1.0 / 24),
		aC3:     math.Float32bits(1.0 / 6),
		aOne:    math.Float32bits(1),
		aExpMin: math.Float32bits(-87.33654),
		aExpMax: math.Float32bits(88.0),
		aBias:   127,
		aSign:   0x80000000,

		aAbs:         0x7fffffff,
		aTwo:         math.Float32bits(2),
		aNegHalf:     math.Float32bits(-0.5),
		aNegInvSqrt2: math.Float32bits(-0.70710678118654752),
		aInvSqrt2Pi:  math.Float32bits(0.39894228040143268),
		aK2:          math.Float32bits(1.5957691216057308),
		aK3:          math.Float32bits(0.044715),
		aK3x3:        math.Float32bits(3 * 0.044715),
		aI7fff:       0x7fff,
		aIOne:        1,
		aQuiet:       0x40,
	}
	// tensor's erfcP (activation_gelu.go), constant term first
	for i, c := range []uint32{math.Float32bits(-1.26551223), math.Float32bits(1.00002368),
		math.Float32bits(0.37409196), math.Float32bits(0.09678418), math.Float32bits(-0.18628806),
		math.Float32bits(0.27886807), math.Float32bits(-1.13520398), math.Float32bits(1.48851587),
		math.Float32bits(-0.82215223), math.Float32bits(0.17087277)} {
		vals[aP0+i] = c
	}
	actTable = GLOBL("actconst", RODATA|NOPTR)
	for i, v := range vals {
		for j := 0; j < 16; j++ {
			DATA(64*i+4*j, U32(v))
		}
	}
}

// goLoop names the Go function in tensor/activation_cpu.go that each kernel reproduces.
var goLoop = map[string]string{
	"actFwd":      "activateCPU",
	"actBwd":      "activateBackwardCPU",
	"swiGLU":      "swiGLUCPU",
	"swiGLUBwd":   "swiGLUBackwardCPU",
	"gelu":        "activateCPU",
	"geluBwd":     "activateBackwardCPU",
	"geluTanh":    "activateCPU",
	"geluTanhBwd": "activateBackwardCPU",
}

// act is the state of one activation kernel.
type act struct {
	isa
	k   map[int]VecVirtual // AVX-512 keeps the constants in registers
	big VecVirtual         // the running maximum of the exp arguments
	rec *[]func()          // when not nil, instructions are recorded here instead of emitted
}

// emit emits an instruction (f), or records it while the kernel interleaves its vectors.
func (g *act) emit(f func()) {
	if g.rec != nil {
		*g.rec = append(*g.rec, f)
		return
	}
	f()
}

// interleave emits the bodies body(0) … body(n−1), each one vector's independent chain of
// instructions, in turns of one instruction each, so that the out-of-order core sees n
// chains at once: the same instructions on the same registers, in another order.
func (g *act) interleave(n int, body func(i int)) {
	streams := make([][]func(), n)
	for i := range streams {
		g.rec = &streams[i]
		body(i)
	}
	g.rec = nil
	for k := 0; ; k++ {
		done := true
		for _, st := range streams {
			if k < len(st) {
				st[k]()
				done = false
			}
		}
		if done {
			return
		}
	}
}

func (g *act) c(i int) Op {
	if r, ok := g.k[i]; ok {
		return r
	}
	return actTable.Offset(64 * i)
}

func (g *act) binop(f func(Op, Op, Op), a, b Op) VecVirtual {
	d := g.vec()
	g.emit(func() { f(b, a, d) }) // Go assembler order: d = a OP b in Intel's operand order
	return d
}

func (g *act) mul(a, b Op) VecVirtual { return g.binop(func(x, y, z Op) { VMULPS(x, y, z) }, a, b) }
func (g *act) add(a, b Op) VecVirtual { return g.binop(func(x, y, z Op) { VADDPS(x, y, z) }, a, b) }
func (g *act) sub(a, b Op) VecVirtual { return g.binop(func(x, y, z Op) { VSUBPS(x, y, z) }, a, b) }
func (g *act) div(a, b Op) VecVirtual { return g.binop(func(x, y, z Op) { VDIVPS(x, y, z) }, a, b) }

// cmpMask returns the lanes where a pred b: a k register (AVX-512) or a lane mask (AVX2).
func (g *act) cmpMask(pred uint8, a VecVirtual, b Op) Op {
	if g.avx512 {
		k := K()
		g.emit(func() { VCMPPS(U8(pred), b, a, k) })
		return k
	}
	m := g.vec()
	g.emit(func() { VCMPPS(U8(pred), b, a, m) })
	return m
}

// sel returns m ? t : f.
func (g *act) sel(m Op, t, f VecVirtual) VecVirtual {
	d := g.vec()
	g.emit(func() {
		if g.avx512 {
			VMOVAPS(f, d)
			VBLENDMPS(t, d, m, d)
		} else {
			VBLENDVPS(m, t, f, d)
		}
	})
	return d
}

// exp32 is hostops.Exp32(u) for u <= 88 (NaN gives NaN); it folds u into g.big.
func (g *act) exp32(u VecVirtual) VecVirtual {
	g.emit(func() { VMAXPS(g.big, u, g.big) }) // Intel: max(u, big), which returns big when u is NaN
	kf := g.add(g.mul(u, g.c(aLog2e)), g.c(aHalf))
	k := g.vec()
	g.emit(func() {
		if g.avx512 {
			VRNDSCALEPS(U8(9), kf, k) // floor, inexact suppressed: int32(kf) rounded down
		} else {
			VROUNDPS(U8(9), kf, k)
		}
	})
	r := g.sub(g.sub(u, g.mul(k, g.c(aLn2Hi))), g.mul(k, g.c(aLn2Lo)))
	p := g.c(aC7)
	for _, c := range []int{aC6, aC5, aC4, aC3, aHalf, aOne, aOne} {
		p = g.add(g.mul(r, p), g.c(c))
	}
	s := g.vec()
	bias := g.c(aBias)
	g.emit(func() {
		VCVTTPS2DQ(k, s)
		VPADDD(bias, s, s)
		VPSLLD(U8(23), s, s)
	})
	e := g.mul(p, s)
	// Below expMin Exp32 returns 0 (an ordered compare: NaN keeps its NaN).
	m := g.cmpMask(ltOQ, u, g.c(aExpMin))
	z := g.vec()
	if g.avx512 {
		g.emit(func() { VXORPS(z, z, z) })
		return g.sel(m, z, e)
	}
	g.emit(func() { VANDNPS(e, m, z) }) // ^m & e
	return z
}

// neg returns −v (the sign bit flipped, as Go's unary minus).
func (g *act) neg(v VecVirtual) VecVirtual {
	d := g.vec()
	sign := g.c(aSign)
	g.emit(func() { VXORPS(sign, v, d) })
	return d
}

// sigmoid returns σ(v) = 1/(1 + Exp32(−v)) and, when pair, σ(−v) as sigmoidPair32 does:
// 1 − σ where Exp32(−v) > 1, else Exp32(−v)·σ.
func (g *act) sigmoid(v VecVirtual, pair bool) (s, oms VecVirtual) {
	e := g.exp32(g.neg(v))
	s = g.div(g.c(aOne), g.add(e, g.c(aOne)))
	if !pair {
		return s, nil
	}
	m := g.cmpMask(gtOQ, e, g.c(aOne))
	return s, g.sel(m, g.sub(g.c(aOne), s), g.mul(e, s))
}

// reg returns constant i in a register (AVX2 keeps most constants in memory, which an
// instruction can read only as its last source).
func (g *act) reg(i int) VecVirtual {
	if r, ok := g.c(i).(VecVirtual); ok {
		return r
	}
	v := g.vec()
	VBROADCASTSS(actTable.Offset(64*i), v) // emitted at once, even while recording: it reads no vector
	g.k[i] = v
	return v
}

// geluCDF2 returns 2Φ(x) = erfc(−x/√2) as tensor's geluCDF2: t·exp(P(t) − a²) with a = |x/√2|,
// t = 1/(1 + a/2), and 2 minus that where −x/√2 < 0.
func (g *act) geluCDF2(x VecVirtual) VecVirtual {
	z := g.mul(x, g.c(aNegInvSqrt2))
	a := g.vec()
	abs := g.c(aAbs)
	g.emit(func() { VANDPS(abs, z, a) })
	t := g.div(g.c(aOne), g.add(g.mul(a, g.c(aHalf)), g.c(aOne)))
	p := Op(g.c(aP9))
	for i := aP9 - 1; i >= aP0; i-- {
		p = g.add(g.mul(t, p), g.c(i))
	}
	e := g.mul(t, g.exp32(g.sub(p.(VecVirtual), g.mul(a, a))))
	zero := g.vec()
	g.emit(func() { VXORPS(zero, zero, zero) })
	return g.sel(g.cmpMask(ltOQ, z, zero), g.sub(g.reg(aTwo), e), e)
}

// geluTanhArg returns 2u = 2√(2/π)·(x + 0.044715·x³) and x².
func (g *act) geluTanhArg(x VecVirtual) (w, xx VecVirtual) {
	xx = g.mul(x, x)
	return g.mul(g.add(x, g.mul(g.mul(xx, x), g.c(aK3))), g.c(aK2)), xx
}

// geluVecs is how many vectors GELU's kernels interleave per iteration on a (1: the others):
// AVX-512 4, with its constants then read from memory (more vectors and the register allocator
// runs out of the 32 registers). On a Zen 4 core 4 cut GELU's time per element by 1.2–1.7×, 2 by
// 1.1–1.25×. The AVX2 kernels, for CPUs without AVX-512, keep one vector per iteration.
func geluVecs(a isa, base string) int {
	if a.avx512 && (base == "gelu" || base == "geluBwd") {
		return 4
	}
	return 1
}

// actKernel emits name+ISA (name+"BF16"+ISA when bf16: the slices hold bfloat16, widened as
// loaded and rounded to nearest even once, as stored); its slices are its outputs then its
// inputs, all of the length of the first input, a multiple of the lane count.
func actKernel(a isa, base string, bf16 bool) {
	g := &act{isa: a}
	sig := actSig[base]
	name, elem, esize := base, "float32", 4
	if bf16 {
		name, elem, esize = base+"BF16", "uint16", 2
	}
	fn := "func(" + strings.Join(sig.params, ", ") + " []" + elem
	if sig.beta {
		fn += ", beta float32"
	}
	fn += ") (big int32)"
	TEXT(name+a.name, NOSPLIT, fn)
	Pragma("noescape")
	what := goLoop[base] + "'s loop"
	if bf16 {
		what += " on bfloat16 (widened at the load, rounded once at the store)"
	}
	Doc(name+a.name+" is "+what+" over whole vectors, bit for bit; the",
		fmt.Sprintf("inputs' length must be a multiple of %d. big is nonzero when an exp argument", a.lanes),
		"exceeded 88: the caller redoes those elements in Go.")
	name += a.name
	var ptrs []Register
	for _, p := range sig.params {
		ptrs = append(ptrs, Load(Param(p).Base(), GP64()))
	}
	n := Load(Param(sig.params[sig.nOut]).Len(), GP64())
	var beta VecVirtual
	if sig.beta {
		x := Load(Param("beta"), XMM())
		beta = g.vec()
		VBROADCASTSS(x, beta)
	}
	g.k = map[int]VecVirtual{}
	for i := 0; i < nKeep; i++ {
		// AVX2 needs 1 as a first source; the rest stay in memory, as on AVX-512 where GELU
		// interleaves more vectors than the registers hold with the constants.
		if (a.avx512 && geluVecs(a, base) == 1) || i == aOne {
			v := g.vec()
			VBROADCASTSS(actTable.Offset(64*i), v)
			g.k[i] = v
		}
	}
	g.big = g.vec()
	VBROADCASTSS(actTable.Offset(64*aExpMin), g.big)
	if geluVecs(a, base) > 1 {
		g.reg(aTwo) // before both loops: the interleaved one would otherwise be the one to load it
	}
	ld := func(p Register, off int) VecVirtual {
		v := g.vec()
		m := Mem{Base: p, Disp: off * esize}
		g.emit(func() {
			if bf16 {
				VPMOVZXWD(m, v)
				VPSLLD(U8(16), v, v)
			} else {
				VMOVUPS(m, v)
			}
		})
		return v
	}
	st := func(v VecVirtual, p Register, off int) {
		m := Mem{Base: p, Disp: off * esize}
		one, c7fff, quiet := g.c(aIOne), g.c(aI7fff), g.c(aQuiet)
		g.emit(func() {
			if bf16 {
				storeBF16(a, v, m, one, c7fff, quiet)
			} else {
				VMOVUPS(v, m)
			}
		})
	}
	body := func(off int) {
		switch base {
		case "actFwd": // y = x·σ(βx)
			x := ld(ptrs[1], off)
			s, _ := g.sigmoid(g.mul(beta, x), false)
			st(g.mul(x, s), ptrs[0], off)
		case "actBwd": // dx = dy·(s + βx·s·oms)
			x := ld(ptrs[1], off)
			bx := g.mul(beta, x)
			s, oms := g.sigmoid(bx, true)
			t := g.add(s, g.mul(g.mul(bx, s), oms))
			st(g.mul(ld(ptrs[2], off), t), ptrs[0], off)
		case "swiGLU": // y = g·σ(g)·up
			x := ld(ptrs[1], off)
			s, _ := g.sigmoid(x, false)
			st(g.mul(g.mul(x, s), ld(ptrs[2], off)), ptrs[0], off)
		case "swiGLUBwd": // dgate = dy·up·(s + g·s·oms), dup = dy·(g·s)
			x := ld(ptrs[2], off)
			s, oms := g.sigmoid(x, true)
			d := ld(ptrs[4], off)
			gs := g.mul(x, s)
			t := g.add(s, g.mul(gs, oms))
			st(g.mul(g.mul(d, ld(ptrs[3], off)), t), ptrs[0], off)
			st(g.mul(d, gs), ptrs[1], off)
		case "gelu": // y = x·(½·2Φ)
			x := ld(ptrs[1], off)
			st(g.mul(x, g.mul(g.geluCDF2(x), g.c(aHalf))), ptrs[0], off)
		case "geluBwd": // dx = dy·(½·2Φ + x·exp(x²·−½)/√(2π))
			x := ld(ptrs[1], off)
			cdf := g.mul(g.geluCDF2(x), g.c(aHalf))
			pdf := g.mul(g.exp32(g.mul(g.mul(x, x), g.c(aNegHalf))), g.c(aInvSqrt2Pi))
			st(g.mul(ld(ptrs[2], off), g.add(cdf, g.mul(x, pdf))), ptrs[0], off)
		case "geluTanh": // y = x·σ(2u)
			x := ld(ptrs[1], off)
			w, _ := g.geluTanhArg(x)
			s, _ := g.sigmoid(w, false)
			st(g.mul(x, s), ptrs[0], off)
		case "geluTanhBwd": // dx = dy·(s + x·2u′·s·oms), 2u′ = K2·(1 + 3·K3·x²)
			x := ld(ptrs[1], off)
			w, xx := g.geluTanhArg(x)
			s, oms := g.sigmoid(w, true)
			du := g.mul(g.add(g.mul(xx, g.c(aK3x3)), g.c(aOne)), g.c(aK2))
			t := g.add(s, g.mul(g.mul(g.mul(x, du), s), oms))
			st(g.mul(ld(ptrs[2], off), t), ptrs[0], off)
		}
	}
	// GELU's bodies are long chains of dependent instructions (the division, the polynomial,
	// the exp): they run geluVecs vectors per iteration, interleaved, so that the core overlaps
	// their latencies, then one at a time. The other kernels run one vector per iteration.
	if nv := geluVecs(a, base); nv > 1 {
		Label(name + "_loopN")
		CMPQ(n, U32(nv*a.lanes))
		JB(LabelRef(name + "_loop"))
		g.interleave(nv, func(i int) { body(i * a.lanes) })
		for _, p := range ptrs {
			ADDQ(U32(nv*a.lanes*esize), p)
		}
		SUBQ(U32(nv*a.lanes), n)
		JMP(LabelRef(name + "_loopN"))
	}
	Label(name + "_loop")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	body(0)
	for _, p := range ptrs {
		ADDQ(U32(a.lanes*esize), p)
	}
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	m := g.cmpMask(gtOQ, g.big, g.c(aExpMax))
	out := GP32()
	if a.avx512 {
		KMOVW(m, out)
	} else {
		VMOVMSKPS(m, out)
	}
	VZEROUPPER()
	Store(out, ReturnIndex(0))
	RET()
}
