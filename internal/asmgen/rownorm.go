package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// rownormFamily emits the row kernels of tensor's host RMSNorm and RoPE (rownorm_amd64.s), each
// for float32 and for bfloat16 activations (widened as loaded, rounded once to nearest even as
// stored: tensor.BF16FromFloat32), bit for bit the Go loops of tensor/norm_cpu.go and
// tensor/rope_cpu.go (nnref's float32 arithmetic in its order):
//
//   - sumSq8: the float64 sums of squares of 8 rows, each row summed in column order as the
//     reference's one chain per row: 8×8 blocks are transposed so that a float64 lane holds a
//     row (AVX2 instructions, which AVX-512 CPUs run too). A float32 square is exact in float64.
//   - scaleRow: y = w·(x·r), two rounded multiplies (AVX-512F and AVX2).
//   - the RMSNorm backward: rmsDot8 (8 rows' float64 sums Σ float64(dy·w)·float64(x·r), as
//     sumSq8) and rmsDXAcc (one row's dx = r·(dy·w − x̂·c) and its terms of the weight
//     gradient, added to column sums that go over the rows in order, in one pass).
//   - rope: the rotate_half rotation of a token's heads, y[i] = x[i]·cos − x[i+half]·sin and
//     y[i+half] = x[i+half]·cos + x[i]·sin, each product rounded before the sum (no FMA).
func rownormFamily() {
	for _, bf16 := range []bool{false, true} {
		sumSq8Kernel(bf16)
		dot8Kernel(bf16)
	}
	for _, a := range []isa{avx512, avx2} {
		for _, bf16 := range []bool{false, true} {
			scaleRowKernel(a, bf16)
			ropeKernel(a, bf16)
			rmsDXAccKernel(a, bf16)
		}
	}
}

// normTable is tensor's roundBF16Const (rownorm_amd64.go), the constants of the bfloat16
// rounding at the store (1, 0x7fff and the quiet bit 0x40, 16 copies each), which the rownorm
// and layernorm kernels share: a Go variable, since avo's own tables are static to their file.
var normTable = NewDataAddr(Symbol{Name: "·roundBF16Const"}, 0)

func dtName(bf16 bool) (string, string, int) {
	if bf16 {
		return "BF16", "uint16", 2
	}
	return "F32", "float32", 4
}

// rowLoad reads one vector of a's width at m as float32 (bfloat16 widened).
func rowLoad(a isa, m Mem, bf16 bool) VecVirtual {
	v := a.vec()
	if bf16 {
		VPMOVZXWD(m, v)
		VPSLLD(U8(16), v, v)
	} else {
		VMOVUPS(m, v)
	}
	return v
}

// rowStore writes v at m (rounded to bfloat16 when bf16).
func rowStore(a isa, v VecVirtual, m Mem, bf16 bool) {
	if bf16 {
		storeBF16(a, v, m, normTable.Offset(0), normTable.Offset(64), normTable.Offset(128))
	} else {
		VMOVUPS(v, m)
	}
}

// sumSq8Kernel emits sumSq8<F32|BF16>AVX2(x, d, ss): ss[k] = Σ_j x[k·d+j]² in float64 over
// the first d/8·8 columns of the 8 rows of d in x, each row in column order.
func sumSq8Kernel(bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "sumSq8" + dt + "AVX2"
	TEXT(name, NOSPLIT, "func(x []"+elem+", d int, ss *[8]float64)")
	Pragma("noescape")
	Doc(name+" writes the float64 sums of squares of the first d/8·8 columns of the 8 rows",
		"of d in x into ss, each row summed in column order (sumSq8's Go loop, bit for bit).")
	p := Load(Param("x").Base(), GP64())
	d := Load(Param("d"), GP64())
	out := Load(Param("ss"), GP64())
	stride := GP64()
	MOVQ(d, stride)
	if esize == 4 {
		SHLQ(U8(2), stride)
	} else {
		SHLQ(U8(1), stride)
	}
	rows := rowPtrs(p, stride)
	n := GP64()
	MOVQ(d, n)
	SHRQ(U8(3), n)
	lo, hi := YMM(), YMM()
	VXORPD(lo, lo, lo)
	VXORPD(hi, hi, hi)
	a := avx2
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	r := make([]VecVirtual, 8)
	for k := range r {
		r[k] = rowLoad(a, Mem{Base: rows[k]}, bf16)
	}
	cols := transpose8(r)
	for j := 0; j < 8; j++ { // column j of the 8 rows, in order
		for h, acc := range []VecVirtual{lo, hi} {
			v := widenHalf(cols[j], h)
			VMULPD(v, v, v)
			VADDPD(v, acc, acc)
		}
	}
	for k := range rows {
		ADDQ(U32(8*esize), rows[k])
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VMOVUPD(lo, Mem{Base: out})
	VMOVUPD(hi, Mem{Base: out, Disp: 32})
	VZEROUPPER()
	RET()
}

// transpose8 returns the 8 columns of the 8×8 float32 block whose rows are r (ymm registers).
func transpose8(r []VecVirtual) []VecVirtual {
	t := make([]VecVirtual, 8)
	for k := 0; k < 8; k += 2 {
		t[k], t[k+1] = YMM(), YMM()
		VUNPCKLPS(r[k+1], r[k], t[k])   // a0 b0 a1 b1 | a4 b4 a5 b5
		VUNPCKHPS(r[k+1], r[k], t[k+1]) // a2 b2 a3 b3 | a6 b6 a7 b7
	}
	u := make([]VecVirtual, 8) // u[0..3]: columns 0,1,2,3 (| 4,5,6,7) of rows 0–3; u[4..7] of rows 4–7
	for h := 0; h < 2; h++ {
		t0, t1, t2, t3 := t[4*h], t[4*h+1], t[4*h+2], t[4*h+3]
		for j, c := range []struct {
			x, y VecVirtual
			imm  uint8
		}{{t0, t2, 0x44}, {t0, t2, 0xee}, {t1, t3, 0x44}, {t1, t3, 0xee}} {
			u[4*h+j] = YMM()
			VSHUFPS(U8(c.imm), c.y, c.x, u[4*h+j])
		}
	}
	cols := make([]VecVirtual, 8)
	for j := range cols {
		cols[j] = YMM()
		imm := uint8(0x20)
		if j >= 4 {
			imm = 0x31
		}
		VPERM2F128(U8(imm), u[4+j%4], u[j%4], cols[j])
	}
	return cols
}

// widenHalf returns lanes 0–3 (h = 0) or 4–7 (h = 1) of the float32 ymm v as float64.
func widenHalf(v VecVirtual, h int) VecVirtual {
	x := XMM()
	if h == 0 {
		x = v.AsX().(VecVirtual)
	} else {
		VEXTRACTF128(U8(1), v, x)
	}
	d := YMM()
	VCVTPS2PD(x, d)
	return d
}

// rowPtrs returns 8 registers pointing at the rows of stride bytes from p.
func rowPtrs(p, stride Register) []GPVirtual {
	rows := make([]GPVirtual, 8)
	for k := range rows {
		rows[k] = GP64()
		if k == 0 {
			MOVQ(p, rows[k])
		} else {
			LEAQ(Mem{Base: rows[k-1], Index: stride, Scale: 1}, rows[k])
		}
	}
	return rows
}

// rows8 addresses 8 rows of stride bytes from p with 4 registers: p, p + 4·stride, stride and
// 3·stride.
type rows8 struct{ p, p4, s, s3 Register }

func newRows8(p, s, s3 Register) rows8 {
	r := rows8{p: p, p4: GP64(), s: s, s3: s3}
	LEAQ(Mem{Base: p, Index: s, Scale: 4}, r.p4)
	return r
}

func (r rows8) at(k int) Mem {
	b := r.p
	if k >= 4 {
		b = r.p4
	}
	switch k % 4 {
	case 1:
		return Mem{Base: b, Index: r.s, Scale: 1}
	case 2:
		return Mem{Base: b, Index: r.s, Scale: 2}
	case 3:
		return Mem{Base: b, Index: r.s3, Scale: 1}
	}
	return Mem{Base: b}
}

func (r rows8) advance(bytes int) {
	ADDQ(U32(bytes), r.p)
	ADDQ(U32(bytes), r.p4)
}

// dot8Kernel emits rmsDot8<F32|BF16>AVX2(x, dy, w, r, d, gx): for each of the 8 rows of d in x
// and dy, gx[k] = Σ_j float64(dy·w) · float64(x·r[k]) over the first d/8·8 columns, in column
// order (the products of two float32 values are exact in float64): RMSNormDX's dot product.
// The block's x·r columns go through the stack, for want of registers.
func dot8Kernel(bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "rmsDot8" + dt + "AVX2"
	TEXT(name, NOSPLIT, "func(x, dy []"+elem+", w []float32, r *[8]float32, d int, gx *[8]float64)")
	Pragma("noescape")
	Doc(name+" writes, for the 8 rows of d in x and dy, the float64 sums over the first d/8·8",
		"columns of float64(dy·w)·float64(x·r[row]), each row in column order (rmsDot8's Go loop, bit for bit).")
	xp := Load(Param("x").Base(), GP64())
	dp := Load(Param("dy").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
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
	lo, hi := YMM(), YMM()
	VXORPD(lo, lo, lo)
	VXORPD(hi, hi, hi)
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
		VMULPS(Mem{Base: rp}, c, c) // x·r
		VMOVUPS(c, local.Offset(32*j))
	}
	for j, c := range transpose8(load(dr)) {
		g := YMM()
		VBROADCASTSS(Mem{Base: wp, Disp: 4 * j}, g)
		VMULPS(g, c, g) // dy·w
		for h, acc := range []VecVirtual{lo, hi} {
			a, b := widenHalf(g, h), YMM()
			VCVTPS2PD(local.Offset(32*j+16*h), b)
			VMULPD(b, a, a)
			VADDPD(a, acc, acc)
		}
	}
	xr.advance(8 * esize)
	dr.advance(8 * esize)
	ADDQ(U32(32), wp)
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	out := Load(Param("gx"), GP64())
	VMOVUPD(lo, Mem{Base: out})
	VMOVUPD(hi, Mem{Base: out, Disp: 32})
	VZEROUPPER()
	RET()
}

// rmsDXAccKernel emits rmsDXAcc<F32|BF16><ISA>(dx, x, dy, w, sw, r, c): with x̂ = x·r,
// dx = r·(dy·w − x̂·c) and sw += dy·x̂, each product, difference and sum rounded to float32,
// over whole vectors: one row's segment of RMSNormDX's last loop and of NormWeightGrad's
// column sums (which go over the rows in order), x and dy read once for both.
func rmsDXAccKernel(a isa, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "rmsDXAcc" + dt + a.name
	TEXT(name, NOSPLIT, "func(dx, x, dy []"+elem+", w, sw []float32, r, c float32)")
	Pragma("noescape")
	Doc(name+" writes dx = r·(dy·w − (x·r)·c) and adds dy·(x·r) to sw (rmsDXAccRow's Go",
		fmt.Sprintf("loop, bit for bit); len(dx) must be a multiple of %d.", a.lanes))
	op := Load(Param("dx").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	dp := Load(Param("dy").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
	sp := Load(Param("sw").Base(), GP64())
	n := Load(Param("dx").Len(), GP64())
	rv, cv := a.vec(), a.vec()
	VBROADCASTSS(Load(Param("r"), XMM()), rv)
	VBROADCASTSS(Load(Param("c"), XMM()), cv)
	Label(name + "_loop")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	x := rowLoad(a, Mem{Base: xp}, bf16)
	dy := rowLoad(a, Mem{Base: dp}, bf16)
	VMULPS(rv, x, x) // x̂ = x·r
	t := a.vec()
	VMULPS(dy, x, t)              // dy·x̂
	VADDPS(Mem{Base: sp}, t, t)   // sw + dy·x̂
	VMOVUPS(t, Mem{Base: sp})     //
	VMULPS(Mem{Base: wp}, dy, dy) // dy·w
	VMULPS(cv, x, x)              // x̂·c
	VSUBPS(x, dy, dy)             // dy·w − x̂·c
	VMULPS(rv, dy, dy)
	rowStore(a, dy, Mem{Base: op}, bf16)
	for _, p := range []Register{op, xp, dp} {
		ADDQ(U32(a.lanes*esize), p)
	}
	ADDQ(U32(a.lanes*4), wp)
	ADDQ(U32(a.lanes*4), sp)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// scaleRowKernel emits scaleRow<F32|BF16><ISA>(y, x, w, r): y = w·(x·r) over whole vectors.
func scaleRowKernel(a isa, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "scaleRow" + dt + a.name
	TEXT(name, NOSPLIT, "func(y, x []"+elem+", w []float32, r float32)")
	Pragma("noescape")
	Doc(name+" writes y = w·(x·r) (scaleRow's Go loop, bit for bit); len(y) must be a",
		fmt.Sprintf("multiple of %d.", a.lanes))
	yp := Load(Param("y").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	wp := Load(Param("w").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	rx := Load(Param("r"), XMM())
	r := a.vec()
	VBROADCASTSS(rx, r)
	Label(name + "_loop")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	x := rowLoad(a, Mem{Base: xp}, bf16)
	VMULPS(r, x, x)
	VMULPS(Mem{Base: wp}, x, x)
	rowStore(a, x, Mem{Base: yp}, bf16)
	ADDQ(U32(a.lanes*esize), xp)
	ADDQ(U32(a.lanes*esize), yp)
	ADDQ(U32(a.lanes*4), wp)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// ropeKernel emits rope<F32|BF16><ISA>(y, x, cos, sin, d): the rotation of columns
// [0, len(cos)) and their partners d/2 further of each row of d in x.
func ropeKernel(a isa, bf16 bool) {
	dt, elem, esize := dtName(bf16)
	name := "rope" + dt + a.name
	TEXT(name, NOSPLIT, "func(y, x []"+elem+", cos, sin []float32, d int)")
	Pragma("noescape")
	Doc(name+" rotates columns [0, len(cos)) of each row of d in x, with their partners d/2",
		"further, into y: ropeHost's Go loop, bit for bit; len(cos) must be a multiple of",
		fmt.Sprintf("%d and len(x) of d.", a.lanes))
	yp := Load(Param("y").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	cp := Load(Param("cos").Base(), GP64())
	sp := Load(Param("sin").Base(), GP64())
	nv := Load(Param("cos").Len(), GP64())
	end := Load(Param("x").Len(), GP64())
	row := Load(Param("d"), GP64())
	sh := U8(2)
	if esize == 2 {
		sh = U8(1)
	}
	SHLQ(sh, end)
	ADDQ(xp, end) // one past x's last byte
	SHLQ(sh, row) // bytes per row
	half := GP64()
	MOVQ(row, half)
	SHRQ(U8(1), half)
	xh, yh, i := GP64(), GP64(), GP64()
	Label(name + "_head")
	CMPQ(xp, end)
	JAE(LabelRef(name + "_done"))
	LEAQ(Mem{Base: xp, Index: half, Scale: 1}, xh)
	LEAQ(Mem{Base: yp, Index: half, Scale: 1}, yh)
	XORQ(i, i)
	Label(name + "_loop")
	CMPQ(i, nv)
	JAE(LabelRef(name + "_next"))
	c, s := a.vec(), a.vec()
	VMOVUPS(Mem{Base: cp, Index: i, Scale: 4}, c)
	VMOVUPS(Mem{Base: sp, Index: i, Scale: 4}, s)
	x0 := rowLoad(a, Mem{Base: xp, Index: i, Scale: uint8(esize)}, bf16)
	x1 := rowLoad(a, Mem{Base: xh, Index: i, Scale: uint8(esize)}, bf16)
	mul := func(p, q VecVirtual) VecVirtual {
		v := a.vec()
		VMULPS(q, p, v)
		return v
	}
	y0, y1 := a.vec(), a.vec()
	VSUBPS(mul(x1, s), mul(x0, c), y0) // x0·cos − x1·sin
	VADDPS(mul(x0, s), mul(x1, c), y1) // x1·cos + x0·sin
	rowStore(a, y0, Mem{Base: yp, Index: i, Scale: uint8(esize)}, bf16)
	rowStore(a, y1, Mem{Base: yh, Index: i, Scale: uint8(esize)}, bf16)
	ADDQ(U32(a.lanes), i)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_next")
	ADDQ(row, xp)
	ADDQ(row, yp)
	JMP(LabelRef(name + "_head"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
