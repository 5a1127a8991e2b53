package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// bf16convFamily emits the bfloat16 conversions of tensor's host ops with bfloat16 activations
// (bf16conv_amd64.s): widening to float32 (exact: the bits shifted up 16) and rounding float32
// to bfloat16 (nearest even, a NaN kept quiet: tensor.BF16FromFloat32 bit for bit, the
// log-prob backward's storeBF16), for AVX-512F (16 lanes) and AVX2 (8 lanes). Whole vectors
// only: the caller finishes the tail in Go. Scalar Go rounding costs more per element than a
// float32 RMSNorm; these keep a bfloat16 op's conversions a small part of it.
func bf16convFamily() {
	emitConstants()
	for _, a := range []isa{avx512, avx2} {
		convKernel(a, false)
		convKernel(a, true)
	}
}

// convKernel emits widenBF16<ISA>(dst []float32, src []uint16) or, when round,
// roundBF16<ISA>(dst []uint16, src []float32), over len(src) elements.
func convKernel(a isa, round bool) {
	g := &kern{isa: a, bf16: !round}
	name, sig, isize, osize := "widenBF16", "func(dst []float32, src []uint16)", 2, 4
	if round {
		name, sig, isize, osize = "roundBF16", "func(dst []uint16, src []float32)", 4, 2
	}
	name += a.name
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name+" converts src into dst; len(src) must be a multiple of", fmt.Sprintf("%d and len(dst) >= len(src).", a.lanes))
	optr := Load(Param("dst").Base(), GP64())
	ptr := Load(Param("src").Base(), GP64())
	n := Load(Param("src").Len(), GP64())
	if round && a.avx512 {
		g.keep(c7fff, cIOne, cQuiet)
	}
	body := func(off int) {
		x := g.load(ptr, off*isize) // widened when !round
		dst := Mem{Base: optr, Disp: off * osize}
		if round {
			g.storeBF16(x, dst)
		} else {
			VMOVUPS(x, dst)
		}
	}
	step := a.unroll * a.lanes
	Label(name + "_loop")
	CMPQ(n, U32(step))
	JB(LabelRef(name + "_one"))
	for j := 0; j < a.unroll; j++ {
		body(j * a.lanes)
	}
	ADDQ(U32(step*isize), ptr)
	ADDQ(U32(step*osize), optr)
	SUBQ(U32(step), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_one")
	CMPQ(n, U32(a.lanes))
	JB(LabelRef(name + "_done"))
	body(0)
	ADDQ(U32(a.lanes*isize), ptr)
	ADDQ(U32(a.lanes*osize), optr)
	SUBQ(U32(a.lanes), n)
	JMP(LabelRef(name + "_one"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
