package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// gemmFamily emits the micro-kernels of internal/gemm (gemm_amd64.s): C[mr, w] = A[mr, k] ·
// B[k, w] for a row-major block of A (row stride lda) and a panel of B (row stride ldb, w
// columns), with w = 64 (four zmm) on AVX-512 and w = 16 (two ymm) on AVX2, for mr = 1..6 rows
// (and 7 on AVX-512).
// The accumulators stay in registers for the whole k loop (24 zmm, or 12 ymm, at mr = 6); each
// step loads one row of the panel and multiplies it by an element of every row of A, broadcast
// into a register (one broadcast and four register FMAs per row of A measured faster than four
// FMAs with embedded-broadcast memory operands), two steps per loop iteration with one offset
// register for all rows of A. At the end the tile is stored, or added to C. The tile of C is
// prefetched gemmPrefetchSteps steps before the loop ends: C comes from L2 or further (a
// caller's other tiles evict it between the K blocks), and without the prefetch its lines were
// waited for at the end of every call (5–10 % of a Zen 4 core at K = 896 and 3584).
func gemmFamily() {
	for _, a := range []isa{avx512, avx2} {
		nv := 4 // vectors per panel row
		if !a.avx512 {
			nv = 2
		}
		for mr := 1; mr <= 6; mr++ {
			gemmKernel(a, mr, nv, false)
		}
		peakKernel(a)
	}
	// The 7-row AVX-512 kernel: 28 zmm accumulators and four for the panel row leave none for a
	// broadcast, so A's elements are embedded-broadcast FMA operands (on Zen 4 as fast as the
	// 6-row kernel per FMA from L1, with 28 FMAs per panel row loaded instead of 24). Its rows
	// are addressed from two pointers (the registers for seven would run out). Mul takes rows 7
	// at a time with it.
	gemmKernel(avx512, 7, 4, false)
	for _, mr := range []int{1, 2, 3, 4, 7} {
		gemmKernel(avx512, mr, 4, true)
	}
}

// peakKernel emits fmaPeak<ISA>(n int): n rounds of 24 (AVX-512) or 12 (AVX2) independent FMAs
// on registers, enough to cover the FMA latency on both pipes. The benchmarks time it to
// measure the core's FMA peak (flops = 2·lanes·FMAs·n), the ceiling the GEMM is compared with.
func peakKernel(a isa) {
	name := "fmaPeak" + a.name
	nacc := 24
	if !a.avx512 {
		nacc = 12
	}
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(fmt.Sprintf("%s runs n rounds of %d independent register FMAs (%d flops per round).", name, nacc, 2*a.lanes*nacc))
	n := Load(Param("n"), GP64())
	acc := make([]VecVirtual, nacc)
	for i := range acc {
		acc[i] = a.vec()
		VXORPS(acc[i], acc[i], acc[i])
	}
	x := a.vec()
	VXORPS(x, x, x)
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	for i := range acc {
		VFMADD231PS(x, x, acc[i])
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// gemmPrefetchSteps is how many steps of k before the end a micro-kernel prefetches its tile of
// C: far enough for a line from L3 to arrive, near enough that the panel and A streaming through
// L1 in the meantime do not evict it again.
const gemmPrefetchSteps = 32

// gemmPrefetchLines is the most cache lines a decode kernel (pf) prefetches per two steps of k:
// the row groups' calls over a 128-step block share the 512 lines of a block ahead.
const gemmPrefetchLines = 8

// gemmKernel emits the kernel of mr rows and nv vectors (of a.lanes float32) per panel row.
// With pf it is the decode variant: every two steps it also prefetches (PREFETCHT0) pfstep/64
// consecutive lines from address pf on and advances pf by pfstep. Mul's decode walk uses it from
// five row groups up (7+7+7+7 and 1…4 rows): the weight block two ahead is fetched while the
// other calls work from L1 (PREFETCHT1 into L2 measured no faster).
func gemmKernel(a isa, mr, nv int, pf bool) {
	w := nv * a.lanes
	name := fmt.Sprintf("gemm%dx%d%s", mr, w, a.name)
	sig := "func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)"
	if pf {
		name = fmt.Sprintf("gemm%dx%dPf%s", mr, w, a.name)
		sig = "func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool, pf uintptr, pfstep int)"
	}
	TEXT(name, NOSPLIT, sig)
	Doc(fmt.Sprintf("%s computes the %dx%d tile C = A·B (or C += A·B when acc): A is %d rows of k", name, mr, w, mr),
		fmt.Sprintf("float32 with row stride lda, B is k rows of %d float32 with row stride ldb, C has row stride", w),
		"ldc (strides in elements). Each element is one sum over k in ascending order, with FMAs.")
	if pf {
		Doc(fmt.Sprintf("Every two steps it also prefetches pfstep/64 lines (at most %d) from pf on and adds pfstep to pf", gemmPrefetchLines),
			"(decode: the weight a later call reads).")
	}
	k := Load(Param("k"), GP64())
	lda := Load(Param("lda"), GP64())
	bp := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(U8(2), lda)
	SHLQ(U8(2), ldb)
	// aMem addresses row i of A at byte disp past the current column; advance moves the column
	// by n bytes. Up to six rows have a pointer each and one offset register; seven (too many
	// registers for that) address rows 4j..4j+3 from two pointers, plus 0, lda, 2·lda and 3·lda.
	var aMem func(i, disp int) Mem
	var advance func(n int)
	if mr <= 6 {
		rows := make([]Register, mr)
		rows[0] = Load(Param("a"), GP64())
		for i := 1; i < mr; i++ {
			rows[i] = GP64()
			LEAQ(Mem{Base: rows[i-1], Index: lda, Scale: 1}, rows[i])
		}
		off := GP64() // byte offset of the current column of A in every row
		XORQ(off, off)
		aMem = func(i, disp int) Mem { return Mem{Base: rows[i], Index: off, Scale: 1, Disp: disp} }
		advance = func(n int) { ADDQ(U8(n), off) }
	} else {
		base := [2]Register{Load(Param("a"), GP64()), GP64()}
		LEAQ(Mem{Base: base[0], Index: lda, Scale: 4}, base[1])
		lda3 := GP64()
		LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)
		aMem = func(i, disp int) Mem {
			m := Mem{Base: base[i/4], Disp: disp}
			switch i % 4 {
			case 1, 2:
				m.Index, m.Scale = lda, uint8(i%4)
			case 3:
				m.Index, m.Scale = lda3, 1
			}
			return m
		}
		advance = func(n int) {
			ADDQ(U8(n), base[0])
			ADDQ(U8(n), base[1])
		}
	}
	acc := make([][]VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = a.vec()
			VXORPS(acc[i][j], acc[i][j], acc[i][j])
		}
	}
	bv := make([]VecVirtual, nv)
	for j := range bv {
		bv[j] = a.vec()
	}
	ebc := mr*nv+nv > 31 // no register left for a broadcast
	var bc VecVirtual
	if !ebc {
		bc = a.vec()
	}
	// step multiplies a row of the panel (at bRow) by a column of A (at aDisp past the current one).
	step := func(bRow Mem, aDisp int) {
		for j := range bv {
			VMOVUPS(bRow.Offset(4*a.lanes*j), bv[j])
		}
		for i := range mr {
			if ebc {
				for j := range bv {
					VFMADD231PS_BCST(aMem(i, aDisp), bv[j], acc[i][j])
				}
				continue
			}
			VBROADCASTSS(aMem(i, aDisp), bc)
			for j := range bv {
				VFMADD231PS(bc, bv[j], acc[i][j])
			}
		}
	}
	// Two steps per iteration, then one for an odd k. C's lines are prefetched when at most
	// gemmPrefetchSteps+1 steps are left: at once for a short k, else when k reaches it (k
	// falls by two, so it passes exactly one of gemmPrefetchSteps+1 and gemmPrefetchSteps).
	var pfp Register
	var pfStep Mem
	if pf {
		pfp = Load(Param("pf"), GP64())
		b, err := Param("pfstep").Resolve()
		if err != nil {
			panic(err)
		}
		pfStep = b.Addr
	}
	CMPQ(k, U8(gemmPrefetchSteps+1))
	JBE(LabelRef(name + "_prefetchc"))
	Label(name + "_loop2")
	CMPQ(k, U8(gemmPrefetchSteps+1))
	JE(LabelRef(name + "_prefetchc"))
	CMPQ(k, U8(gemmPrefetchSteps))
	JE(LabelRef(name + "_prefetchc"))
	Label(name + "_steps")
	CMPQ(k, U8(2))
	JL(LabelRef(name + "_tail"))
	step(Mem{Base: bp}, 0)
	if pf { // pfstep/64 lines (at most gemmPrefetchLines) from pf on, then pf += pfstep
		for l := range gemmPrefetchLines {
			CMPQ(pfStep, U32(64*l))
			JLE(LabelRef(name + "_pfdone"))
			PREFETCHT0(Mem{Base: pfp, Disp: 64 * l})
		}
		Label(name + "_pfdone")
		ADDQ(pfStep, pfp)
	}
	step(Mem{Base: bp, Index: ldb, Scale: 1}, 4)
	LEAQ(Mem{Base: bp, Index: ldb, Scale: 2}, bp)
	advance(8)
	SUBQ(U8(2), k)
	JMP(LabelRef(name + "_loop2"))
	Label(name + "_prefetchc")
	pc := Load(Param("c"), GP64())
	pl := Load(Param("ldc"), GP64())
	SHLQ(U8(2), pl)
	for i := range mr {
		for j := 0; j < 4*w; j += 64 {
			PREFETCHT0(Mem{Base: pc, Disp: j})
		}
		if i < mr-1 {
			ADDQ(pl, pc)
		}
	}
	JMP(LabelRef(name + "_steps"))
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
			VADDPS(Mem{Base: row, Disp: 4 * a.lanes * j}, acc[i][j], acc[i][j])
		}
		ADDQ(ldc, row)
	}
	Label(name + "_write")
	for i := range mr {
		for j := range nv {
			VMOVUPS(acc[i][j], Mem{Base: cp, Disp: 4 * a.lanes * j})
		}
		ADDQ(ldc, cp)
	}
	VZEROUPPER()
	RET()
}
