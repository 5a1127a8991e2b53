// Command asmgen generates the amd64 assembly kernels of mtrl with avo
// (github.com/mmcloughlin/avo). It is its own module so that avo never becomes a dependency of
// mtrl. Each op family is one generated file pair (NAME_amd64.s, NAME_stub_amd64.go), chosen
// with -family and written through avo's -out, -stubs and -pkg flags by go generate in its
// package:
//
//	logprob  tensor/logprob_amd64.s            (the default family; main.go)
//	penalty  divergence/penalty_amd64.s        (low_var_kl, its gradient, perception score; penalty.go)
//	masked   internal/hostops/masked_amd64.s   (masked sums and whitening; masked.go)
//	policy   ppo/policy_amd64.s                (the Default PPO loss per token; policy.go)
//	gemm     internal/gemm/gemm_amd64.s        (the packed matrix-multiply micro-kernels; gemm.go)
//	gemmbf16 internal/gemm/gemmbf16_amd64.s    (the bfloat16 micro-kernels on VDPBF16PS; gemmbf16.go)
//	attention tensor/attention_amd64.s         (the softmax and score-gradient rows of attention; attention.go)
//	bf16conv tensor/bf16conv_amd64.s           (bfloat16 widening and rounding of the host ops; bf16conv.go)
//	activation tensor/activation_amd64.s       (SiLU, QuickGELU, GELU, GELUTanh, SwiGLU, backwards, float32 and bfloat16, bit-exact; activation.go)
//	rownorm  tensor/rownorm_amd64.s            (RMSNorm's row sums and scaling, RoPE's rotation, bit-exact; rownorm.go)
//	layernorm tensor/layernorm_amd64.s         (LayerNorm's row sums, scaling and dx, bit-exact; layernorm.go)
//
// go run . -all <repository root> regenerates every family (the program runs itself once per
// family, since avo builds one file per process). Each package has a staleness test that
// regenerates its files and compares them with the committed ones.
//
// The log-prob kernels are the vocabulary-wide loops of tensor.LogProbEntropy and its backward: a block
// maximum, a block fold (sum exp(z-m) and sum exp(z-m)*(z-m)), and the per-row gradient. Each
// exists for AVX-512F (16 lanes) and AVX2+FMA (8 lanes), for float32 and bfloat16 logits, with
// and without a temperature division. The kernels process whole vectors only: callers pass
// slices whose length is a multiple of the lane count and finish the tail in Go.
//
// exp(u) uses the plain range reduction k = round(u*log2e), r = (u - k*ln2Hi) - k*ln2Lo (two
// FMAs), the degree-7 Taylor polynomial of exp(r) in Horner form with FMAs, times 2^k. It is
// valid for u in [-87, 88] with AVX-512 (VSCALEFPS) and for k+127 in [1, 254] with AVX2 (the
// exponent bits are built directly); the log-prob kernels use u in [-87, 0.34], the per-token
// families |u| <= 20. The AVX2 log-prob fold and backward use exp8 instead (an 8-entry 2^(j/8)
// table in one VPERMD and a degree-4 polynomial: three FMAs fewer). internal/hostops.ExpNonPos,
// the pure-Go version, is table-driven too (128 entries, degree 2). The AVX-512 kernels need
// AVX512F and AVX512DQ (VXORPS on zmm).
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Constant table: each entry is 8 replicated 32-bit words (one ymm), so AVX2 code can use it as
// a memory operand and AVX-512 code broadcasts its first word.
const (
	cLog2e = iota
	cLn2Hi
	cLn2Lo
	cC7
	cC6
	cC5
	cC4
	cC3
	cC2
	cOne
	cMinus87
	cBias  // int32 127
	c7fff  // int32 0x7fff
	cIOne  // int32 1
	cQuiet // int32 0x40
	cNegInf
	cMagic  // 1.5*2^23 + 127: fma(u, log2e, magic) rounds u*log2e to an integer k and holds k+127 in its low bits
	cHiMask // int32 0xffff0000
	nConst
)

var constTable Mem

// prefetchAhead is how far past the next block's current position the fused fold asks for
// cache lines, in bytes.
const prefetchAhead = 4096

func f32bits(f float64) uint32 { return math.Float32bits(float32(f)) }

func emitConstants() {
	vals := lpconstValues()
	constTable = GLOBL("lpconst", RODATA|NOPTR)
	for i, v := range vals {
		for j := 0; j < 8; j++ {
			DATA(32*i+4*j, U32(v))
		}
	}
}

func lpconstValues() [nConst]uint32 {
	return [nConst]uint32{
		cLog2e:   f32bits(1.44269504088896341),
		cLn2Hi:   f32bits(0.693359375),
		cLn2Lo:   f32bits(-2.12194440e-4),
		cC7:      f32bits(1.0 / 5040),
		cC6:      f32bits(1.0 / 720),
		cC5:      f32bits(1.0 / 120),
		cC4:      f32bits(1.0 / 24),
		cC3:      f32bits(1.0 / 6),
		cC2:      f32bits(1.0 / 2),
		cOne:     f32bits(1),
		cMinus87: f32bits(-87),
		cBias:    127,
		c7fff:    0x7fff,
		cIOne:    1,
		cQuiet:   0x40,
		cNegInf:  math.Float32bits(float32(math.Inf(-1))),
		cMagic:   f32bits(1.5*(1<<23) + 127),
		cHiMask:  0xffff0000,
	}
}

func cst(i int) Mem {
	if i >= xBase {
		return xTable.Offset(64 * (i - xBase))
	}
	return constTable.Offset(32 * i)
}

// isa describes one vector instruction set.
type isa struct {
	name   string
	lanes  int
	avx512 bool
	unroll int
}

var (
	avx512 = isa{name: "AVX512", lanes: 16, avx512: true, unroll: 4}
	avx2   = isa{name: "AVX2", lanes: 8, avx512: false, unroll: 2}
)

func (a isa) vec() VecVirtual {
	if a.avx512 {
		return ZMM()
	}
	return YMM()
}

// bcast loads constant i into a new vector register.
func (a isa) bcast(i int) VecVirtual {
	v := a.vec()
	if a.avx512 || i >= xBase {
		VBROADCASTSS(cst(i), v)
	} else {
		VMOVUPS(cst(i), v)
	}
	return v
}

// kernel state for one function.
type kern struct {
	isa
	bf16 bool // logits are bfloat16
	k    map[int]Op
	tbl  bool // AVX2 exp through the 2^(j/8) table (log-prob family only; see exp8)
}

// c returns constant i as an operand: a register for AVX-512 (all constants are kept live), a
// memory operand for AVX2 unless it was loaded into a register with keep.
func (g *kern) c(i int) Op {
	if r, ok := g.k[i]; ok {
		return r
	}
	if g.avx512 && i < xBase {
		return cst(xWide + i) // the 64-byte copy in xconst (per-token families only)
	}
	return cst(i)
}

func (g *kern) keep(ids ...int) {
	if g.k == nil {
		g.k = map[int]Op{}
	}
	for _, i := range ids {
		g.k[i] = g.bcast(i)
	}
}

func (g *kern) esize() int {
	if g.bf16 {
		return 2
	}
	return 4
}

// load reads one vector of logits at ptr+off as float32.
func (g *kern) load(ptr Register, off int) VecVirtual {
	v := g.vec()
	m := Mem{Base: ptr, Disp: off}
	if g.bf16 {
		VPMOVZXWD(m, v)
		VPSLLD(U8(16), v, v)
	} else {
		VMOVUPS(m, v)
	}
	return v
}

// mov copies a vector register or an (unaligned) constant into dst.
func (g *kern) mov(src Op, dst VecVirtual) {
	if _, ok := src.(Mem); ok {
		VMOVUPS(src, dst)
	} else {
		VMOVAPS(src, dst)
	}
}

// loadPair reads 2*lanes bfloat16 logits at ptr+off as two float32 vectors: the even-indexed
// elements (shifted up) and the odd ones (masked). For reductions, where order does not matter,
// this is one instruction per vector instead of a widening load and a shift.
func (g *kern) loadPair(ptr Register, off int) (VecVirtual, VecVirtual) {
	lo, hi := g.vec(), g.vec()
	m := Mem{Base: ptr, Disp: off}
	if g.avx512 {
		VMOVDQU32(m, hi)
		VPSLLD(U8(16), hi, lo)
		VPANDD(g.c(cHiMask), hi, hi)
	} else {
		VMOVDQU(m, hi)
		VPSLLD(U8(16), hi, lo)
		VPAND(g.c(cHiMask), hi, hi)
	}
	return lo, hi
}

// exp returns exp(u) for u in [-87, 0.34] (NaN gives NaN).
//
// k = round(u*log2e) comes from one FMA with the magic constant 1.5*2^23+127: the sum is
// rounded to an integer (nearest even) and its low mantissa bits hold k+127, so shifting its
// bits left by 23 gives the float32 2^k directly (the exponent field overflows away). AVX-512
// scales with VSCALEFPS instead.
func (g *kern) exp(u VecVirtual) VecVirtual {
	if g.tbl {
		return g.exp8(u)
	}
	b := g.vec()
	kf := g.vec()
	r := g.vec()
	p := g.vec()
	g.mov(g.c(cMagic), b)
	VFMADD231PS(g.c(cLog2e), u, b) // b = u*log2e + magic
	VSUBPS(g.c(cMagic), b, kf)     // kf = k, exactly
	VMOVAPS(u, r)
	VFNMADD231PS(g.c(cLn2Hi), kf, r)
	VFNMADD231PS(g.c(cLn2Lo), kf, r)
	g.mov(g.c(cC7), p)
	for _, c := range []int{cC6, cC5, cC4, cC3, cC2, cOne, cOne} {
		VFMADD213PS(g.c(c), r, p)
	}
	if g.avx512 {
		VSCALEFPS(kf, p, p)
	} else {
		VPSLLD(U8(23), b, b)
		VMULPS(b, p, p)
	}
	return p
}

// Entries of the lpexp8 table (32 bytes each) of exp8.
const (
	e8Table = iota // int32 bits(2^(j/8)) - (127<<23) - (j<<20), j = 0..7
	e8Log2e        // 8*log2e
	e8Magic        // 1.5*2^23 + 127*8
	e8Ln2Hi        // ln2/8 rounded to float32
	e8Ln2Lo        // ln2/8 - e8Ln2Hi
	e8C4           // 1/24
	nExp8
)

var exp8Table Mem

func emitExp8Table() {
	exp8Table = GLOBL("lpexp8", RODATA|NOPTR)
	hi := float32(math.Ln2 / 8)
	vals := [nExp8]uint32{
		e8Log2e: f32bits(8 * 1.44269504088896341),
		e8Magic: f32bits(1.5*(1<<23) + 127*8),
		e8Ln2Hi: math.Float32bits(hi),
		e8Ln2Lo: f32bits(math.Ln2/8 - float64(hi)),
		e8C4:    f32bits(1.0 / 24),
	}
	for i, v := range vals {
		for j := 0; j < 8; j++ {
			if i == e8Table {
				v = math.Float32bits(float32(math.Exp2(float64(j)/8))) - 127<<23 - uint32(j)<<20
			}
			DATA(32*i+4*j, U32(v))
		}
	}
}

// exp8 is exp for AVX2 in the log-prob kernels: n = round(u*8/ln2) from one FMA with a magic
// constant whose sum holds n + 127*8 in its low bits b, r = u - n*ln2/8 (|r| <= ln2/16), the
// degree-4 Taylor polynomial of exp(r) (truncation error r^5/120 < 1.3e-9), times 2^(n/8):
// VPERMD picks the table entry by the low 3 bits of b and b<<20 adds floor(n/8)+127 into the
// exponent field (the table entry cancels the bits of n mod 8 that the shift leaves below it).
// Three FMAs fewer than exp, and the scale is off the polynomial's dependency chain.
func (g *kern) exp8(u VecVirtual) VecVirtual {
	e := func(i int) Mem { return exp8Table.Offset(32 * i) }
	b, kf, r, p, sc := g.vec(), g.vec(), g.vec(), g.vec(), g.vec()
	VMOVUPS(e(e8Magic), b)
	VFMADD231PS(e(e8Log2e), u, b) // b = u*8*log2e + magic
	VSUBPS(e(e8Magic), b, kf)     // kf = n, exactly
	VMOVAPS(u, r)
	VFNMADD231PS(e(e8Ln2Hi), kf, r)
	VFNMADD231PS(e(e8Ln2Lo), kf, r)
	VMOVUPS(e(e8C4), p)
	for _, c := range []int{cC3, cC2, cOne, cOne} {
		VFMADD213PS(g.c(c), r, p)
	}
	VPERMD(e(e8Table), b, sc)
	VPSLLD(U8(20), b, b)
	VPADDD(b, sc, sc)
	VMULPS(sc, p, p)
	return p
}

func (g *kern) suffix() string {
	if g.bf16 {
		return "BF16"
	}
	return "F32"
}

func (g *kern) sliceType() string {
	if g.bf16 {
		return "[]uint16"
	}
	return "[]float32"
}

// hsum reduces the lanes of v into lane 0 of an xmm register, in a fixed order.
func (g *kern) hreduce(v VecVirtual, add bool) VecVirtual {
	op := func(a, b, dst Op) {
		if add {
			VADDPS(a, b, dst)
		} else {
			VMAXPS(a, b, dst)
		}
	}
	y := v
	if g.avx512 {
		hi := YMM()
		VEXTRACTF64X4(U8(1), v, hi)
		op(hi, v.AsY(), hi)
		y = hi
	}
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	op(x, y.AsX(), x)
	x2 := XMM()
	VMOVHLPS(x, x, x2)
	op(x2, x, x)
	VMOVSHDUP(x, x2)
	if add {
		VADDSS(x2, x, x)
	} else {
		VMAXSS(x2, x, x)
	}
	return x
}

// maxKernel: func(x []T) float32, the maximum ignoring NaN; -Inf for an empty slice.
func maxKernel(a isa, bf16 bool) {
	g := &kern{isa: a, bf16: bf16}
	name := "max" + g.suffix() + a.name
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x %s) float32", g.sliceType()))
	Pragma("noescape")
	Doc(name+" returns the maximum of x, ignoring NaN (-Inf when empty); len(x) must be a multiple of", fmt.Sprint(a.lanes)+".")
	ptr := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	const u = 4
	acc := make([]VecVirtual, u)
	for j := range acc {
		acc[j] = a.bcast(cNegInf)
	}
	step := u * a.lanes
	Label(name + "_loop")
	CMPQ(n, U32(step))
	JB(LabelRef(name + "_one"))
	for j := 0; j < u; j++ {
		x := g.load(ptr, j*a.lanes*g.esize())
		VMAXPS(acc[j], x, acc[j]) // a NaN x returns acc (the second source)
	}
	ADDQ(U32(step*g.esize()), ptr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_one")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	x := g.load(ptr, 0)
	VMAXPS(acc[0], x, acc[0])
	ADDQ(U32(a.lanes*g.esize()), ptr)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_one"))
	Label(name + "_done")
	VMAXPS(acc[1], acc[0], acc[0])
	VMAXPS(acc[3], acc[2], acc[2])
	VMAXPS(acc[2], acc[0], acc[0])
	r := g.hreduce(acc[0], false)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// foldKernel: func(x, next []T, m, temp float32) (s, t, nm float32) with u = max(z - m, -87),
// z = x (or x/temp when scaled), s = sum exp(u), t = sum exp(u)*u, per lane in float32 and
// reduced in a fixed order, and nm = the maximum of next ignoring NaN (-Inf when empty).
//
// next is the following block of the row: its loads are interleaved with the fold of x, so the
// memory system streams the next block while this one computes, and the next fold finds it in
// L1. len(next) <= len(x), both multiples of the lane count.
func foldKernel(a isa, bf16, scaled bool) {
	g := &kern{isa: a, bf16: bf16, tbl: !a.avx512}
	name := "fold" + g.suffix()
	if scaled {
		name += "Scaled"
	}
	name += a.name
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x, next %s, m, temp float32) (s, t, nm float32)", g.sliceType()))
	Pragma("noescape")
	Doc(name+" returns sum exp(u) and sum exp(u)*u over u = max(z-m, -87), z = x"+map[bool]string{true: "/temp", false: ""}[scaled]+",",
		"and the maximum of next ignoring NaN (-Inf when empty). len(next) <= len(x), both multiples",
		fmt.Sprintf("of %d.", a.lanes))
	ptr := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	nptr := Load(Param("next").Base(), GP64())
	nn := Load(Param("next").Len(), GP64())
	mx := Load(Param("m"), XMM())
	mv := a.vec()
	VBROADCASTSS(mx, mv)
	var tv VecVirtual
	if scaled {
		tx := Load(Param("temp"), XMM())
		tv = a.vec()
		VBROADCASTSS(tx, tv)
	}
	if a.avx512 {
		g.keep(cLog2e, cLn2Hi, cLn2Lo, cC7, cC6, cC5, cC4, cC3, cC2, cOne, cMinus87, cMagic)
		if bf16 {
			g.keep(cHiMask)
		}
	} else {
		g.keep(cMinus87, cMagic)
	}
	npairs := a.unroll
	s := make([]VecVirtual, npairs)
	t := make([]VecVirtual, npairs)
	for j := range s {
		s[j], t[j] = a.vec(), a.vec()
		VXORPS(s[j], s[j], s[j])
		VXORPS(t[j], t[j], t[j])
	}
	nmax := a.bcast(cNegInf)
	body := func(j int, x VecVirtual) {
		if scaled {
			VDIVPS(tv, x, x)
		}
		VSUBPS(mv, x, x)
		VMAXPS(x, g.c(cMinus87), x) // NaN-propagating: NaN u is the second source
		e := g.exp(x)
		VADDPS(e, s[j], s[j])
		VFMADD231PS(x, e, t[j])
	}
	nextMax := func(off int) {
		if g.bf16 {
			lo, hi := g.loadPair(nptr, off)
			VMAXPS(nmax, lo, nmax) // a NaN returns nmax (the second source)
			VMAXPS(nmax, hi, nmax)
		} else {
			VMAXPS(nmax, g.load(nptr, off), nmax)
		}
	}
	step := a.unroll * a.lanes
	sb := step * g.esize()
	lbl := func(s string) string { return name + "_" + s }
	foldStep := func(withNext bool) {
		if withNext {
			for off := 0; off < sb; off += 64 {
				PREFETCHT0(Mem{Base: nptr, Disp: prefetchAhead + off})
			}
		}
		for j := 0; j < a.unroll; j++ {
			if g.bf16 {
				if withNext && j%2 == 0 {
					nextMax(j * a.lanes * 2)
				}
				lo, hi := g.loadPair(ptr, j*a.lanes*2)
				body(j, lo)
				j++
				body(j, hi)
			} else {
				if withNext {
					nextMax(j * a.lanes * 4)
				}
				body(j, g.load(ptr, j*a.lanes*4))
			}
		}
		ADDQ(U32(sb), ptr)
		SUBQ(U32(step), n)
	}
	// Fused: fold step of x, max of the same span of next.
	Label(lbl("fused"))
	CMPQ(nn, U32(step))
	JB(LabelRef(lbl("nextone")))
	foldStep(true)
	ADDQ(U32(sb), nptr)
	SUBQ(U32(step), nn)
	JMP(LabelRef(lbl("fused")))
	// What is left of next, one vector at a time.
	Label(lbl("nextone"))
	CMPQ(nn, U32(a.lanes))
	JB(LabelRef(lbl("loop")))
	VMAXPS(nmax, g.load(nptr, 0), nmax)
	ADDQ(U32(a.lanes*g.esize()), nptr)
	SUBQ(U32(a.lanes), nn)
	JMP(LabelRef(lbl("nextone")))
	// What is left of x.
	Label(lbl("loop"))
	CMPQ(n, U32(step))
	JB(LabelRef(lbl("one")))
	foldStep(false)
	JMP(LabelRef(lbl("loop")))
	Label(lbl("one"))
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(lbl("done")))
	body(0, g.load(ptr, 0))
	ADDQ(U32(a.lanes*g.esize()), ptr)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(lbl("one")))
	Label(lbl("done"))
	// Fixed-order pairwise combination of the accumulators, then of the lanes.
	for w := 1; w < npairs; w *= 2 {
		for j := 0; j+w < npairs; j += 2 * w {
			VADDPS(s[j+w], s[j], s[j])
			VADDPS(t[j+w], t[j], t[j])
		}
	}
	rs := g.hreduce(s[0], true)
	Store(rs, Return("s"))
	rt := g.hreduce(t[0], true)
	Store(rt, Return("t"))
	rm := g.hreduce(nmax, false)
	Store(rm, Return("nm"))
	VZEROUPPER()
	RET()
}

// bwdKernel: func(out []O, x []T, temp, logZ, gl, ge, h, negInvT float32) writes for every x
// out = exp(u)*(ge*(u+h)+gl)*negInvT with u = max(z-logZ, -87), z = x (or x/temp); float32 or
// bfloat16 out (round to nearest even, NaN kept quiet).
//
// With nt (float32 out only) the stores are non-temporal: out must be aligned to the vector
// size, and the gradient goes to memory without first reading the lines it overwrites.
func bwdKernel(a isa, bf16, out16, scaled, nt bool) {
	g := &kern{isa: a, bf16: bf16, tbl: !a.avx512}
	name := "bwd" + g.suffix()
	otype := "[]float32"
	if out16 {
		name += "To16"
		otype = "[]uint16"
	}
	if nt {
		name += "NT"
	}
	if scaled {
		name += "Scaled"
	}
	name += a.name
	TEXT(name, NOSPLIT, fmt.Sprintf("func(out %s, x %s, temp, logZ, gl, ge, h, negInvT float32)", otype, g.sliceType()))
	Pragma("noescape")
	Doc(name+" writes the logits gradient of one row; len(x) must be a multiple of",
		fmt.Sprintf("%d and len(out) >= len(x).", a.lanes))
	optr := Load(Param("out").Base(), GP64())
	ptr := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	scal := func(name string) VecVirtual {
		x := Load(Param(name), XMM())
		v := a.vec()
		VBROADCASTSS(x, v)
		return v
	}
	var tv VecVirtual
	if scaled {
		tv = scal("temp")
	}
	lz, gl, ge, h, ni := scal("logZ"), scal("gl"), scal("ge"), scal("h"), scal("negInvT")
	if a.avx512 {
		g.keep(cLog2e, cLn2Hi, cLn2Lo, cC7, cC6, cC5, cC4, cC3, cC2, cOne, cMinus87, cMagic)
		if out16 {
			g.keep(c7fff, cIOne, cQuiet)
		}
	} else {
		g.keep(cMinus87, cMagic)
	}
	osize := 4
	if out16 {
		osize = 2
	}
	body := func(off int) {
		x := g.load(ptr, off*g.esize())
		if scaled {
			VDIVPS(tv, x, x)
		}
		VSUBPS(lz, x, x)
		VMAXPS(x, g.c(cMinus87), x)
		e := g.exp(x)
		VADDPS(h, x, x)
		VFMADD213PS(gl, ge, x) // x = ge*(u+h) + gl
		VMULPS(x, e, e)
		VMULPS(ni, e, e)
		dst := Mem{Base: optr, Disp: off * osize}
		if !out16 {
			if nt {
				VMOVNTPS(e, dst)
			} else {
				VMOVUPS(e, dst)
			}
			return
		}
		g.storeBF16(e, dst)
	}
	step := a.unroll * a.lanes
	Label(name + "_loop")
	CMPQ(n, U32(step))
	JB(LabelRef(name + "_one"))
	for j := 0; j < a.unroll; j++ {
		body(j * a.lanes)
	}
	ADDQ(U32(step*g.esize()), ptr)
	ADDQ(U32(step*osize), optr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_one")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	body(0)
	ADDQ(U32(a.lanes*g.esize()), ptr)
	ADDQ(U32(a.lanes*osize), optr)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_one"))
	Label(name + "_done")
	if nt {
		SFENCE()
	}
	VZEROUPPER()
	RET()
}

// storeBF16 rounds the float32 lanes of e to bfloat16 at dst: b + 0x7fff + ((b>>16)&1), >>16;
// NaN: (b>>16)|0x40 (tensor.BF16FromFloat32). AVX-512 needs c7fff, cIOne and cQuiet kept.
func (g *kern) storeBF16(e VecVirtual, dst Mem) {
	storeBF16(g.isa, e, dst, g.c(cIOne), g.c(c7fff), g.c(cQuiet))
}

// storeBF16 is kern.storeBF16 with the int32 constants 1, 0x7fff and 0x40 given as operands
// (registers, or memory of the vector's width).
func storeBF16(a isa, e VecVirtual, dst Mem, one, c7fff, quiet Op) {
	r := a.vec()
	nan := a.vec()
	VPSRLD(U8(16), e, nan)
	if a.avx512 {
		VPANDD(one, nan, r)
		VPADDD(c7fff, r, r)
		VPADDD(e, r, r)
		VPSRLD(U8(16), r, r)
		VPORD(quiet, nan, nan)
		k := K()
		VCMPPS(U8(3), e, e, k) // unordered: NaN lanes
		VPBLENDMD(nan, r, k, r)
		VPMOVDW(r, dst)
	} else {
		VPAND(one, nan, r)
		VPADDD(c7fff, r, r)
		VPADDD(e, r, r)
		VPSRLD(U8(16), r, r)
		VPOR(quiet, nan, nan)
		msk := a.vec()
		VCMPPS(U8(3), e, e, msk)
		VBLENDVPS(msk, nan, r, r)
		hi := XMM()
		VEXTRACTI128(U8(1), r, hi)
		VPACKUSDW(hi, r.AsX(), hi)
		VMOVDQU(hi, dst)
	}
}

// logprobFamily emits the log-prob kernels of package tensor (logprob_amd64.s).
func logprobFamily() {
	emitConstants()
	emitExp8Table()
	for _, a := range []isa{avx512, avx2} {
		for _, bf16 := range []bool{false, true} {
			maxKernel(a, bf16)
			for _, scaled := range []bool{false, true} {
				foldKernel(a, bf16, scaled)
			}
			for _, out16 := range []bool{false, true} {
				for _, scaled := range []bool{false, true} {
					bwdKernel(a, bf16, out16, scaled, false)
					if !out16 {
						bwdKernel(a, bf16, out16, scaled, true)
					}
				}
			}
		}
	}
}
