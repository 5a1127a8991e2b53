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
//   - rope: the rotate_half rotation of a token's heads, y[i] = x[i]·cos − x[i+half]·sin and
//     y[i+half] = x[i+half]·cos + x[i]·sin, each product rounded before the sum (no FMA).
func rownormFamily() {
	nt := GLOBL("normconst", RODATA|NOPTR)
	for i, v := range []uint32{1, 0x7fff, 0x40} {
		for j := 0; j < 16; j++ {
			DATA(64*i+4*j, U32(v))
		}
	}
	normTable = nt
	for _, bf16 := range []bool{false, true} {
		sumSq8Kernel(bf16)
	}
	for _, a := range []isa{avx512, avx2} {
		for _, bf16 := range []bool{false, true} {
			scaleRowKernel(a, bf16)
			ropeKernel(a, bf16)
		}
	}
}

var normTable Mem

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
	rows := make([]GPVirtual, 8)
	for k := range rows {
		rows[k] = GP64()
		if k == 0 {
			MOVQ(p, rows[k])
		} else {
			LEAQ(Mem{Base: rows[k-1], Index: stride, Scale: 1}, rows[k])
		}
	}
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
	for j := 0; j < 8; j++ { // column j of the 8 rows, in order
		col := YMM()
		imm := uint8(0x20)
		if j >= 4 {
			imm = 0x31
		}
		VPERM2F128(U8(imm), u[4+j%4], u[j%4], col)
		for h, acc := range []VecVirtual{lo, hi} {
			x := XMM()
			if h == 0 {
				x = col.AsX().(VecVirtual)
			} else {
				VEXTRACTF128(U8(1), col, x)
			}
			v := YMM()
			VCVTPS2PD(x, v)
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
