package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// activationFamily emits the sigmoid-family activations of tensor's host ops
// (activation_amd64.s): x·σ(βx) (SiLU, QuickGELU), its derivative, SwiGLU and its backward,
// for AVX-512F (16 lanes) and AVX2 (8 lanes), whole vectors only.
//
// They reproduce the Go loops of tensor/activation_cpu.go bit for bit: the exp is
// hostops.Exp32's own arithmetic (x·log2e + 1/2 floored, the two-part ln2 reduction, the
// degree-7 Taylor polynomial in Horner form, times 2^k built from its exponent bits) with
// separate multiplies and adds (no FMA: the Go code rounds each product explicitly), and
// the quotients are VDIVPS, correctly rounded like DIVSS. Exp32 takes math.Exp above 88; the
// kernels cannot, so each returns whether a lane's exp argument exceeded 88 and the caller
// redoes those elements in Go (only inputs below −88/β, where σ underflows).
func activationFamily() {
	emitActConstants()
	for _, a := range []isa{avx512, avx2} {
		actKernel(a, "actFwd", "func(y, x []float32, beta float32) (big int32)", 1)
		actKernel(a, "actBwd", "func(dx, x, dy []float32, beta float32) (big int32)", 1)
		actKernel(a, "swiGLU", "func(y, gate, up []float32) (big int32)", 1)
		actKernel(a, "swiGLUBwd", "func(dgate, dup, gate, up, dy []float32) (big int32)", 2)
	}
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
	"actFwd":    "activateCPU",
	"actBwd":    "activateBackwardCPU",
	"swiGLU":    "swiGLUCPU",
	"swiGLUBwd": "swiGLUBackwardCPU",
}

// act is the state of one activation kernel.
type act struct {
	isa
	k   map[int]VecVirtual // AVX-512 keeps the constants in registers
	big VecVirtual         // the running maximum of the exp arguments
}

func (g *act) c(i int) Op {
	if r, ok := g.k[i]; ok {
		return r
	}
	return actTable.Offset(64 * i)
}

func (g *act) binop(f func(Op, Op, Op), a, b Op) VecVirtual {
	d := g.vec()
	f(b, a, d) // Go assembler order: d = a OP b in Intel's operand order
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
		VCMPPS(U8(pred), b, a, k)
		return k
	}
	m := g.vec()
	VCMPPS(U8(pred), b, a, m)
	return m
}

// sel returns m ? t : f.
func (g *act) sel(m Op, t, f VecVirtual) VecVirtual {
	d := g.vec()
	if g.avx512 {
		VMOVAPS(f, d)
		VBLENDMPS(t, d, m, d)
	} else {
		VBLENDVPS(m, t, f, d)
	}
	return d
}

// exp32 is hostops.Exp32(u) for u <= 88 (NaN gives NaN); it folds u into g.big.
func (g *act) exp32(u VecVirtual) VecVirtual {
	VMAXPS(g.big, u, g.big) // Intel: max(u, big), which returns big when u is NaN
	kf := g.add(g.mul(u, g.c(aLog2e)), g.c(aHalf))
	k := g.vec()
	if g.avx512 {
		VRNDSCALEPS(U8(9), kf, k) // floor, inexact suppressed: int32(kf) rounded down
	} else {
		VROUNDPS(U8(9), kf, k)
	}
	r := g.sub(g.sub(u, g.mul(k, g.c(aLn2Hi))), g.mul(k, g.c(aLn2Lo)))
	p := g.c(aC7)
	for _, c := range []int{aC6, aC5, aC4, aC3, aHalf, aOne, aOne} {
		p = g.add(g.mul(r, p), g.c(c))
	}
	s := g.vec()
	VCVTTPS2DQ(k, s)
	VPADDD(g.c(aBias), s, s)
	VPSLLD(U8(23), s, s)
	e := g.mul(p, s)
	// Below expMin Exp32 returns 0 (an ordered compare: NaN keeps its NaN).
	m := g.cmpMask(ltOQ, u, g.c(aExpMin))
	if g.avx512 {
		z := g.vec()
		VXORPS(z, z, z)
		return g.sel(m, z, e)
	}
	z := g.vec()
	VANDNPS(e, m, z) // ^m & e
	return z
}

// neg returns −v (the sign bit flipped, as Go's unary minus).
func (g *act) neg(v VecVirtual) VecVirtual {
	d := g.vec()
	VXORPS(g.c(aSign), v, d)
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

// actKernel emits name+ISA with sig; its slices are nOut outputs then the inputs, all of the
// length of the first input, a multiple of the lane count.
func actKernel(a isa, name, sig string, nOut int) {
	g := &act{isa: a}
	name += a.name
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	base := name[:len(name)-len(a.name)]
	Doc(name+" is "+goLoop[base]+"'s loop over whole vectors, bit for bit; the inputs' length",
		fmt.Sprintf("must be a multiple of %d. big is nonzero when an exp argument exceeded 88: the", a.lanes),
		"caller redoes those elements in Go.")
	params := map[string][]string{
		"actFwd":    {"y", "x"},
		"actBwd":    {"dx", "x", "dy"},
		"swiGLU":    {"y", "gate", "up"},
		"swiGLUBwd": {"dgate", "dup", "gate", "up", "dy"},
	}[base]
	var ptrs []Register
	for _, p := range params {
		ptrs = append(ptrs, Load(Param(p).Base(), GP64()))
	}
	n := Load(Param(params[nOut]).Len(), GP64())
	var beta VecVirtual
	if base[:3] == "act" {
		x := Load(Param("beta"), XMM())
		beta = g.vec()
		VBROADCASTSS(x, beta)
	}
	g.k = map[int]VecVirtual{}
	for i := 0; i < nAct; i++ {
		if a.avx512 || i == aOne { // AVX2 needs 1 as a first source; the rest stay in memory
			v := g.vec()
			VBROADCASTSS(actTable.Offset(64*i), v)
			g.k[i] = v
		}
	}
	g.big = g.vec()
	VBROADCASTSS(actTable.Offset(64*aExpMin), g.big)
	ld := func(p Register, off int) VecVirtual {
		v := g.vec()
		VMOVUPS(Mem{Base: p, Disp: off * 4}, v)
		return v
	}
	st := func(v VecVirtual, p Register, off int) { VMOVUPS(v, Mem{Base: p, Disp: off * 4}) }
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
		}
	}
	u := 2
	if !a.avx512 {
		u = 1
	}
	loop(name, a.lanes, u, n, ptrs, body)
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
