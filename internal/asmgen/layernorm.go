package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// layernormFamily emits the row kernels of tensor's host LayerNorm (layernorm_amd64.s), for
// float32 and bfloat16 activations (widened as loaded, rounded once to nearest even as stored),
// bit for bit the Go loops of tensor/layernorm_cpu.go (nnref's arithmetic in its order):
//
//   - sum8 and devSq8: 8 rows' float64 sums of x and of (x − mean)² (mean in float64), each
//     row in column order as rownorm's sumSq8: layerStats' two passes;
//   - lnScale: y = w·((x − mu)·r) + b;
//   - lnDot8: 8 rows' float64 sums of g = dy·w and of g·((x − mu)·r) (LayerNormDX's sums);
//   - lnDXAcc: dx = r·(g − mg − x̂·mgx), and the row's terms dy·x̂ and dy of the weight and bias
//     gradients added to their column sums, in one pass over x and dy.
//
// The bfloat16 rounding reads rownorm's table (normTable).
func layernormFamily() {
	for _, bf16 := range []bool{false, true} {
		stat8Kernel("sum8", bf16)
		stat8Kernel("devSq8", bf16)
		lnDot8Kernel(bf16)
	}
	for _, a := range []isa{avx512, avx2} {
		for _, bf16 := range []bool{false, true} {
			lnScaleKernel(a, bf16)
			lnDXAccKernel(a, bf16)
		}
	}
}

// stat8Kernel emits sum8<F32|BF16>AVX2(x, d, s), s[k] = Σ_j float64(x[k·d+j]), or
// devSq8<F32|BF16>AVX2(x, d, mu, s), s[k] = Σ_j (float64(x[k·d+j]) − mu[k])² (the difference
// and the square each rounded in float64, no FMA), over the first d/8·8 columns of the 8 rows
// of d in x, each row in column order, as sumSq8.
func stat8Kernel(kind string, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := kind + dt + "AVX2"
	dev := kind == "devSq8"
	if dev {
		TEXT(name, NOSPLIT, "func(x []"+elem+", d int, mu, s *[8]float64)")
		Doc(name+" writes the float64 sums of (x − mu[row])² over the first d/8·8 columns of the",
			"8 rows of d in x into s, each row in column order (layerStats' second pass, bit for bit).")
	} else {
		TEXT(name, NOSPLIT, "func(x []"+elem+", d int, s *[8]float64)")
		Doc(name+" writes the float64 sums of the first d/8·8 columns of the 8 rows of d in x into",
			"s, each row in column order (layerStats' first pass, bit for bit).")
	}
	Pragma("noescape")
	p := Load(Param("x").Base(), GP64())
	d := Load(Param("d"), GP64())
	var mu Register
	if dev {
		mu = Load(Param("mu"), GP64())
	}
	stride, s3 := GP64(), GP64()
	MOVQ(d, stride)
	SHLQ(U8(uint8(esize/2)), stride)
	LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, s3)
	xr := newRows8(p, stride, s3)
	n := GP64()
	MOVQ(d, n)
	SHRQ(U8(3), n)
	lo, hi := YMM(), YMM()
	VXORPD(lo, lo, lo)
	VXORPD(hi, hi, hi)
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	r := make([]VecVirtual, 8)
	for k := range r {
		r[k] = rowLoad(avx2, xr.at(k), bf16)
	}
	cols := transpose8(r)
	for j := 0; j < 8; j++ { // column j of the 8 rows, in order
		for h, acc := range []VecVirtual{lo, hi} {
			v := widenHalf(cols[j], h)
			if dev {
				VSUBPD(Mem{Base: mu, Disp: 32 * h}, v, v)
				VMULPD(v, v, v)
			}
			VADDPD(v, acc, acc)
		}
	}
	xr.advance(8 * esize)
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	out := Load(Param("s"), GP64())
	VMOVUPD(lo, Mem{Base: out})
	VMOVUPD(hi, Mem{Base: out, Disp: 32})
	VZEROUPPER()
	RET()
}

// lnDot8Kernel emits lnDot8<F32|BF16>AVX2(x, dy, w, mu, r, d, sg, sgx): for each of the 8 rows
// of d in x and dy, with g = dy·w and x̂ = (x − mu[row])·r[row] rounded to float32,
// sg[k] = Σ_j float64(g) and sgx[k] = Σ_j float64(g)·float64(x̂) over the first d/8·8
// columns, in column order (a product of two float32 values is exact in float64):
// LayerNormDX's sums. The block's x̂ columns go through the stack, as in rmsDot8.
func lnDot8Kernel(bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "lnDot8" + dt + "AVX2"
	TEXT(name, NOSPLIT, "func(x, dy []"+elem+", w []float32, mu, r *[8]float32, d int, sg, sgx *[8]float64)")
	Pragma("noescape")
	Doc(name+" writes, for the 8 rows of d in x and dy, the float64 sums over the first d/8·8",
		"columns of float64(dy·w) and of float64(dy·w)·float64((x − mu[row])·r[row]), each row in",
		"column order (LayerNormDX's sums, bit for bit).")
	xp := Load(Param("x").Base(), GP64())
	dp := Load(Param("dy").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
	mp := Load(Param("mu"), GP64())
	rp := Load(Param("r"), GP64())
	d := Load(Param("d"), GP64())
	stride, s3 := GP64(), GP64()
	MOVQ(d, stride)
	SHLQ(U8(uint8(esize/2)), stride)
	LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, s3)
	xr, dr := newRows8(xp, stride, s3), newRows8(dp, stride, s3)
	n := GP64()
	MOVQ(d, n)
	SHRQ(U8(3), n)
	local := AllocLocal(8 * 32)
	acc := make([]VecVirtual, 4) // sg lo, hi; sgx lo, hi
	for i := range acc {
		acc[i] = YMM()
		VXORPD(acc[i], acc[i], acc[i])
	}
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	load := func(r rows8) []VecVirtual {
		v := make([]VecVirtual, 8)
		for k := range v {
			v[k] = rowLoad(avx2, r.at(k), bf16)
		}
		return v
	}
	for j, c := range transpose8(load(xr)) {
		VSUBPS(Mem{Base: mp}, c, c) // x − mu
		VMULPS(Mem{Base: rp}, c, c) // x̂
		VMOVUPS(c, local.Offset(32*j))
	}
	for j, c := range transpose8(load(dr)) {
		g := YMM()
		VBROADCASTSS(Mem{Base: wp, Disp: 4 * j}, g)
		VMULPS(g, c, g) // dy·w
		for h := 0; h < 2; h++ {
			a, b := widenHalf(g, h), YMM()
			VADDPD(a, acc[h], acc[h])
			VCVTPS2PD(local.Offset(32*j+16*h), b)
			VMULPD(b, a, a)
			VADDPD(a, acc[2+h], acc[2+h])
		}
	}
	xr.advance(8 * esize)
	dr.advance(8 * esize)
	ADDQ(U32(32), wp)
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	for i, p := range []string{"sg", "sgx"} {
		out := Load(Param(p), GP64())
		VMOVUPD(acc[2*i], Mem{Base: out})
		VMOVUPD(acc[2*i+1], Mem{Base: out, Disp: 32})
	}
	VZEROUPPER()
	RET()
}

// lnScaleKernel emits lnScale<F32|BF16><ISA>(y, x, w, b, mu, r): y = w·((x − mu)·r) + b, each
// operation rounded to float32, over whole vectors (nnref.LayerNorm's loop).
func lnScaleKernel(a isa, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "lnScale" + dt + a.name
	TEXT(name, NOSPLIT, "func(y, x []"+elem+", w, b []float32, mu, r float32)")
	Pragma("noescape")
	Doc(name+" writes y = w·((x − mu)·r) + b (LayerNorm's Go loop, bit for bit); len(y) must be",
		fmt.Sprintf("a multiple of %d.", a.lanes))
	yp := Load(Param("y").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	mv, rv := a.vec(), a.vec()
	VBROADCASTSS(Load(Param("mu"), XMM()), mv)
	VBROADCASTSS(Load(Param("r"), XMM()), rv)
	Label(name + "_loop")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	x := rowLoad(a, Mem{Base: xp}, bf16)
	VSUBPS(mv, x, x)
	VMULPS(rv, x, x)
	VMULPS(Mem{Base: wp}, x, x)
	VADDPS(Mem{Base: bp}, x, x)
	rowStore(a, x, Mem{Base: yp}, bf16)
	ADDQ(U32(a.lanes*esize), xp)
	ADDQ(U32(a.lanes*esize), yp)
	ADDQ(U32(a.lanes*4), wp)
	ADDQ(U32(a.lanes*4), bp)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// lnDXAccKernel emits lnDXAcc<F32|BF16><ISA>(dx, x, dy, w, sw, sb, mu, r, mg, mgx): with
// x̂ = (x − mu)·r, dx = r·((dy·w − mg) − x̂·mgx), sw += dy·x̂ and sb += dy, each operation
// rounded to float32, over whole vectors: one row's segment of LayerNormDX's last loop and of
// NormWeightGrad's column sums (which go over the rows in order), x and dy read once for both.
func lnDXAccKernel(a isa, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "lnDXAcc" + dt + a.name
	TEXT(name, NOSPLIT, "func(dx, x, dy []"+elem+", w, sw, sb []float32, mu, r, mg, mgx float32)")
	Pragma("noescape")
	Doc(name+" writes dx = r·(dy·w − mg − ((x − mu)·r)·mgx) and adds dy·((x − mu)·r) to sw and",
		fmt.Sprintf("dy to sb (lnDXAccRow's Go loop, bit for bit); len(dx) must be a multiple of %d.", a.lanes))
	op := Load(Param("dx").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	dp := Load(Param("dy").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
	swp := Load(Param("sw").Base(), GP64())
	sbp := Load(Param("sb").Base(), GP64())
	n := Load(Param("dx").Len(), GP64())
	mv, rv, gv, cv := a.vec(), a.vec(), a.vec(), a.vec()
	VBROADCASTSS(Load(Param("mu"), XMM()), mv)
	VBROADCASTSS(Load(Param("r"), XMM()), rv)
	VBROADCASTSS(Load(Param("mg"), XMM()), gv)
	VBROADCASTSS(Load(Param("mgx"), XMM()), cv)
	Label(name + "_loop")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	x := rowLoad(a, Mem{Base: xp}, bf16)
	dy := rowLoad(a, Mem{Base: dp}, bf16)
	VSUBPS(mv, x, x)
	VMULPS(rv, x, x) // x̂
	t, g := a.vec(), a.vec()
	VMULPS(dy, x, t)             // dy·x̂
	VADDPS(Mem{Base: swp}, t, t) // sw + dy·x̂
	VMOVUPS(t, Mem{Base: swp})
	VADDPS(Mem{Base: sbp}, dy, t) // sb + dy
	VMOVUPS(t, Mem{Base: sbp})
	VMULPS(Mem{Base: wp}, dy, g) // dy·w
	VSUBPS(gv, g, g)             // − mg
	VMULPS(cv, x, x)             // x̂·mgx
	VSUBPS(x, g, g)
	VMULPS(rv, g, g)
	rowStore(a, g, Mem{Base: op}, bf16)
	for _, p := range []Register{op, xp, dp} {
		ADDQ(U32(a.lanes*esize), p)
	}
	for _, p := range []Register{wp, swp, sbp} {
		ADDQ(U32(a.lanes*4), p)
	}
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
