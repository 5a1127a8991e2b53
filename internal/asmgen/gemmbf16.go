package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// gemmbf16Family emits the bfloat16 micro-kernels of internal/gemm (gemmbf16_amd64.s): the
// 64-column tile C[mr, 64] = A[mr, 2·kp] · B[2·kp, 64] for mr = 1..6 rows, with A and B
// bfloat16 and C float32, on AVX512_BF16's VDPBF16PS (per float32 lane: acc += a₁·b₁, then
// acc += a₀·b₀, over a pair of bfloat16). B is a panel in pair layout: pair row p holds, for each
// of the 64 columns, the two bfloat16 of rows 2p and 2p+1 (128 bfloat16, four zmm); A's pair
// (a[2p], a[2p+1]) is one 32-bit word, broadcast. Products of two bfloat16 are exact in float32,
// so only the accumulation rounds.
//
// Go's assembler has no VDPBF16PS, so the instruction is emitted as its EVEX bytes (evexDPBF16PS,
// checked against GNU as by internal/gemm's TestEVEXMatchesGNUAs). The bytes name physical
// registers, so every vector register of these kernels is physical: the accumulators Z0..Z23,
// the panel row Z24..Z27 and the broadcasts Z28..Z31 (one per row, modulo four, so consecutive
// rows do not wait on one register).
func gemmbf16Family() {
	for mr := 1; mr <= 6; mr++ {
		gemmBF16Kernel(mr)
	}
	dpPeakKernel()
}

// EVEXDPBF16PS returns the encoding of VDPBF16PS zmm(dst), zmm(src1), zmm(src2) (Intel operand
// order: dst += src1 · src2 by bfloat16 pairs): EVEX.512.F3.0F38.W0 52 /r with register operands,
// no masking. The EVEX prefix stores the register numbers' high bits inverted: R̄ and R̄′ (bits 3
// and 4 of dst), X̄ and B̄ (bits 4 and 3 of src2, the r/m operand), v̄vvv and V̄′ (src1).
func evexDPBF16PS(dst, src1, src2 int) [6]byte {
	inv := func(r, bit int) byte { return byte(^(r >> bit) & 1) }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0b10 // mm = 0F38
	p1 := byte(0)<<7 | byte(^src1&15)<<3 | 1<<2 | 0b10                               // W0, v̄vvv, pp = F3
	p2 := byte(0b10)<<5 | inv(src1, 4)<<3                                            // z0, L'L = 512, b0, V̄′, aaa = k0
	modrm := byte(0b11)<<6 | byte(dst&7)<<3 | byte(src2&7)
	return [6]byte{0x62, p0, p1, p2, 0x52, modrm}
}

// vdpbf16ps emits VDPBF16PS dst, src1, src2 (dst += src1·src2) as its bytes (a little-endian
// LONG and WORD), after a comment with the instruction in Go's operand order.
func vdpbf16ps(dst, src1, src2 int) {
	Comment(fmt.Sprintf("VDPBF16PS Z%d, Z%d, Z%d", src2, src1, dst))
	e := evexDPBF16PS(dst, src1, src2)
	long := uint32(e[0]) | uint32(e[1])<<8 | uint32(e[2])<<16 | uint32(e[3])<<24
	Instruction(&ir.Instruction{Opcode: "LONG", Operands: []Op{U32(long)}})
	Instruction(&ir.Instruction{Opcode: "WORD", Operands: []Op{U16(uint16(e[4]) | uint16(e[5])<<8)}})
}

func zmm(i int) VecPhysical {
	return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
}

func gemmBF16Kernel(mr int) {
	const nv = 4 // zmm per panel pair row
	name := fmt.Sprintf("gemm%dx64BF16", mr)
	TEXT(name, NOSPLIT, "func(kp int, a *uint16, lda int, b *uint16, ldb int, c *float32, ldc int, acc bool)")
	Doc(fmt.Sprintf("%s computes the %dx64 tile C = A·B (or C += A·B when acc) on AVX512_BF16:", name, mr),
		fmt.Sprintf("A is %d rows of 2·kp bfloat16 (row stride lda), B is kp pair rows of 64 bfloat16 pairs", mr),
		"(row stride ldb), strides in bfloat16 elements; C is float32 (row stride ldc). Each element is",
		"one float32 sum over the pairs in ascending order (VDPBF16PS: odd element, then even).")
	k := Load(Param("kp"), GP64())
	lda := Load(Param("lda"), GP64())
	bp := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(U8(1), lda)
	SHLQ(U8(1), ldb)
	rows := make([]Register, mr)
	rows[0] = Load(Param("a"), GP64())
	for i := 1; i < mr; i++ {
		rows[i] = GP64()
		LEAQ(Mem{Base: rows[i-1], Index: lda, Scale: 1}, rows[i])
	}
	off := GP64() // byte offset of the current pair of A in every row
	XORQ(off, off)
	acc := func(i, j int) int { return nv*i + j }
	for i := range mr {
		for j := range nv {
			z := zmm(acc(i, j))
			VPXORD(z, z, z)
		}
	}
	step := func(bRow Mem, aDisp int) {
		for j := range nv {
			VMOVDQU32(bRow.Offset(64*j), zmm(24+j))
		}
		for i := range mr {
			bc := 28 + i%4
			VPBROADCASTD(Mem{Base: rows[i], Index: off, Scale: 1, Disp: aDisp}, zmm(bc))
			for j := range nv {
				vdpbf16ps(acc(i, j), 24+j, bc)
			}
		}
	}
	Label(name + "_loop2")
	CMPQ(k, U8(2))
	JL(LabelRef(name + "_tail"))
	step(Mem{Base: bp}, 0)
	step(Mem{Base: bp, Index: ldb, Scale: 1}, 4)
	LEAQ(Mem{Base: bp, Index: ldb, Scale: 2}, bp)
	ADDQ(U8(8), off)
	SUBQ(U8(2), k)
	JMP(LabelRef(name + "_loop2"))
	Label(name + "_tail")
	TESTQ(k, k)
	JZ(LabelRef(name + "_store"))
	step(Mem{Base: bp}, 0)

	Label(name + "_store")
	cp := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(U8(2), ldc)
	flag := Load(Param("acc"), GP8())
	TESTB(flag, flag)
	JZ(LabelRef(name + "_write"))
	row := GP64()
	MOVQ(cp, row)
	for i := range mr {
		for j := range nv {
			VADDPS(Mem{Base: row, Disp: 64 * j}, zmm(acc(i, j)), zmm(acc(i, j)))
		}
		ADDQ(ldc, row)
	}
	Label(name + "_write")
	for i := range mr {
		for j := range nv {
			VMOVUPS(zmm(acc(i, j)), Mem{Base: cp, Disp: 64 * j})
		}
		ADDQ(ldc, cp)
	}
	VZEROUPPER()
	RET()
}

// dpPeakKernel emits dpbf16Peak(n int): n rounds of 24 independent register VDPBF16PS (each 32
// multiplies and 32 adds per zmm: 1536 flops per round), the ceiling of the bfloat16 GEMM.
func dpPeakKernel() {
	const name, nacc = "dpbf16Peak", 24
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(fmt.Sprintf("%s runs n rounds of %d independent register VDPBF16PS (%d flops per round).", name, nacc, 64*nacc))
	n := Load(Param("n"), GP64())
	for i := range nacc + 1 {
		VPXORD(zmm(i), zmm(i), zmm(i))
	}
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	for i := range nacc {
		vdpbf16ps(i, nacc, nacc)
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
