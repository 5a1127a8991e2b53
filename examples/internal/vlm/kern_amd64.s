//go:build !noasm

#include "textflag.h"

// func kern4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
// C[0:4, 0:16] += A[0:4, 0:k] · B[0:k, 0:16]; strides in elements. Needs AVX2 and FMA.
TEXT ·kern4x16(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R9
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R10
	SHLQ $2, R8
	SHLQ $2, R9
	SHLQ $2, R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	LEAQ (SI)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	XORQ AX, AX

loop:
	TESTQ CX, CX
	JEQ   done
	VMOVUPS      (DI), Y8
	VMOVUPS      32(DI), Y9
	VBROADCASTSS (SI)(AX*1), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VBROADCASTSS (R11)(AX*1), Y11
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS (R12)(AX*1), Y12
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VBROADCASTSS (R13)(AX*1), Y13
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $4, AX
	ADDQ         R9, DI
	DECQ         CX
	JMP          loop

done:
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DX)
	VADDPS  32(DX), Y1, Y1
	VMOVUPS Y1, 32(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Y2, Y2
	VMOVUPS Y2, (DX)
	VADDPS  32(DX), Y3, Y3
	VMOVUPS Y3, 32(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Y4, Y4
	VMOVUPS Y4, (DX)
	VADDPS  32(DX), Y5, Y5
	VMOVUPS Y5, 32(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Y6, Y6
	VMOVUPS Y6, (DX)
	VADDPS  32(DX), Y7, Y7
	VMOVUPS Y7, 32(DX)
	VZEROUPPER
	RET

// Constants of the vector exp, each repeated in 8 lanes (32 bytes): the same range reduction and
// degree-7 Taylor polynomial as hostops.Exp32.
DATA expc<>+0(SB)/4, $0x3fb8aa3b   // log2(e)
DATA expc<>+4(SB)/4, $0x3f318000   // ln2Hi 0.693359375
DATA expc<>+8(SB)/4, $0xb95e8083   // ln2Lo -2.12194440e-4
DATA expc<>+12(SB)/4, $0xc2aeac4f  // expMin -87.33654
DATA expc<>+16(SB)/4, $0x42b00000  // expMax 88
DATA expc<>+20(SB)/4, $0x0000007f  // exponent bias 127 (integer)
DATA expc<>+24(SB)/4, $0xbfd9db23  // -1.702 (GELU)
DATA expc<>+28(SB)/4, $0x3f800000  // 1
GLOBL expc<>(SB), RODATA|NOPTR, $32

// Taylor coefficients 1/7! … 1/2! (1/1! and 1/0! are the constant 1).
DATA expp<>+0(SB)/4, $0x39500d01   // 1/5040
DATA expp<>+4(SB)/4, $0x3ab60b61   // 1/720
DATA expp<>+8(SB)/4, $0x3c088889   // 1/120
DATA expp<>+12(SB)/4, $0x3d2aaaab  // 1/24
DATA expp<>+16(SB)/4, $0x3e2aaaab  // 1/6
DATA expp<>+20(SB)/4, $0x3f000000  // 1/2
GLOBL expp<>(SB), RODATA|NOPTR, $24

// EXPCONST broadcasts the constants into Y8..Y15 (Y14 = -1.702, Y15 = 1).
#define EXPCONST \
	VBROADCASTSS expc<>+0(SB), Y8; \
	VBROADCASTSS expc<>+4(SB), Y9; \
	VBROADCASTSS expc<>+8(SB), Y10; \
	VBROADCASTSS expc<>+12(SB), Y11; \
	VBROADCASTSS expc<>+16(SB), Y12; \
	VBROADCASTSS expc<>+20(SB), Y13; \
	VBROADCASTSS expc<>+24(SB), Y14; \
	VBROADCASTSS expc<>+28(SB), Y15

// EXP sets Y0 = exp(Y0) lane-wise (clobbers Y1..Y4): 0 below expMin, NaN for NaN, inputs above 88
// are taken as 88. k = round(x·log2e), r = x − k·ln2 (hi/lo), exp(r) by Horner, times 2^k.
// VCMPPS predicate 5 (not-less-than, unordered true) keeps NaN lanes; VMAXPS and VMINPS return
// their second source, x, when it is NaN.
#define EXP \
	VCMPPS $5, Y11, Y0, Y4; \
	VMAXPS Y0, Y11, Y0; \
	VMINPS Y0, Y12, Y0; \
	VMULPS Y8, Y0, Y2; \
	VROUNDPS $0, Y2, Y2; \
	VMOVAPS Y0, Y1; \
	VFNMADD231PS Y9, Y2, Y1; \
	VFNMADD231PS Y10, Y2, Y1; \
	VBROADCASTSS expp<>+0(SB), Y3; \
	VBROADCASTSS expp<>+4(SB), Y0; \
	VFMADD213PS Y0, Y1, Y3; \
	VBROADCASTSS expp<>+8(SB), Y0; \
	VFMADD213PS Y0, Y1, Y3; \
	VBROADCASTSS expp<>+12(SB), Y0; \
	VFMADD213PS Y0, Y1, Y3; \
	VBROADCASTSS expp<>+16(SB), Y0; \
	VFMADD213PS Y0, Y1, Y3; \
	VBROADCASTSS expp<>+20(SB), Y0; \
	VFMADD213PS Y0, Y1, Y3; \
	VFMADD213PS Y15, Y1, Y3; \
	VFMADD213PS Y15, Y1, Y3; \
	VCVTPS2DQ Y2, Y2; \
	VPADDD Y13, Y2, Y2; \
	VPSLLD $23, Y2, Y2; \
	VMULPS Y2, Y3, Y0; \
	VANDPS Y4, Y0, Y0

// func geluFwd(n int, u, a *float32)
// a[i] = u[i]·σ(1.702·u[i]) for i < n, n a multiple of 8 (a may be u).
TEXT ·geluFwd(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ u+8(FP), SI
	MOVQ a+16(FP), DI
	EXPCONST

gfLoop:
	SUBQ    $8, CX
	JLT     gfDone
	VMOVUPS (SI), Y5
	VMULPS  Y14, Y5, Y0 // -1.702·u
	EXP
	VADDPS  Y15, Y0, Y0
	VDIVPS  Y0, Y15, Y0 // σ = 1/(1+e)
	VMULPS  Y0, Y5, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	JMP     gfLoop

gfDone:
	VZEROUPPER
	RET

// func geluBwd(n int, u, da *float32)
// da[i] *= σ + 1.702·u·σ·(1−σ) with σ = σ(1.702·u[i]), for i < n, n a multiple of 8.
TEXT ·geluBwd(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ u+8(FP), SI
	MOVQ da+16(FP), DI
	EXPCONST

gbLoop:
	SUBQ    $8, CX
	JLT     gbDone
	VMOVUPS (SI), Y5
	VMULPS  Y14, Y5, Y0
	EXP
	VADDPS  Y15, Y0, Y0
	VDIVPS  Y0, Y15, Y0 // σ
	VXORPS  Y6, Y6, Y6
	VSUBPS  Y14, Y6, Y6 // 1.702
	VMULPS  Y5, Y6, Y6  // 1.702·u
	VMULPS  Y0, Y6, Y6  // ·σ
	VSUBPS  Y0, Y15, Y1 // 1-σ
	VMULPS  Y1, Y6, Y6
	VADDPS  Y6, Y0, Y6  // σ + …
	VMULPS  (DI), Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	JMP     gbLoop

gbDone:
	VZEROUPPER
	RET

// func axpyRows(k int, a *float32, b *float32, ldb int, c *float32, n int)
// c[0:n] += Σ_{p<k} a[p]·b[p·ldb : p·ldb+n], n a multiple of 8; for each column the sum runs
// over p in order. Columns go in blocks of 32, then 16, then 8.
TEXT ·axpyRows(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R9
	MOVQ c+32(FP), DX
	MOVQ n+40(FP), R8
	SHLQ $2, R9

ax32:
	CMPQ    R8, $32
	JLT     ax16
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	MOVQ    SI, R10
	MOVQ    DI, R11
	MOVQ    CX, R12

ax32p:
	TESTQ        R12, R12
	JEQ          ax32e
	VBROADCASTSS (R10), Y4
	VFMADD231PS  (R11), Y4, Y0
	VFMADD231PS  32(R11), Y4, Y1
	VFMADD231PS  64(R11), Y4, Y2
	VFMADD231PS  96(R11), Y4, Y3
	ADDQ         $4, R10
	ADDQ         R9, R11
	DECQ         R12
	JMP          ax32p

ax32e:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	ADDQ    $128, DX
	ADDQ    $128, DI
	SUBQ    $32, R8
	JMP     ax32

ax16:
	CMPQ    R8, $16
	JLT     ax8
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	MOVQ    SI, R10
	MOVQ    DI, R11
	MOVQ    CX, R12

ax16p:
	TESTQ        R12, R12
	JEQ          ax16e
	VBROADCASTSS (R10), Y4
	VFMADD231PS  (R11), Y4, Y0
	VFMADD231PS  32(R11), Y4, Y1
	ADDQ         $4, R10
	ADDQ         R9, R11
	DECQ         R12
	JMP          ax16p

ax16e:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, R8
	JMP     ax16

ax8:
	CMPQ    R8, $8
	JLT     axDone
	VMOVUPS (DX), Y0
	MOVQ    SI, R10
	MOVQ    DI, R11
	MOVQ    CX, R12

ax8p:
	TESTQ        R12, R12
	JEQ          ax8e
	VBROADCASTSS (R10), Y4
	VFMADD231PS  (R11), Y4, Y0
	ADDQ         $4, R10
	ADDQ         R9, R11
	DECQ         R12
	JMP          ax8p

ax8e:
	VMOVUPS Y0, (DX)
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, R8
	JMP     ax8

axDone:
	VZEROUPPER
	RET

// func softmaxRow(n int, x *float32, scale float32)
// x[0:n] = softmax(scale·x[0:n]) for n a multiple of 8 (pad with −Inf: padded lanes come out 0):
// the maximum, exp(scale·x − scale·max) with the sum kept in 8 lanes, then times 1/sum.
TEXT ·softmaxRow(SB), NOSPLIT, $0-20
	MOVQ         n+0(FP), CX
	MOVQ         x+8(FP), SI
	VBROADCASTSS scale+16(FP), Y7
	EXPCONST
	MOVQ         SI, DI
	MOVQ         CX, R8
	VMOVUPS      (SI), Y6

smMax:
	SUBQ    $8, R8
	JLE     smMaxDone
	ADDQ    $32, DI
	VMAXPS  (DI), Y6, Y6
	JMP     smMax

smMaxDone:
	VEXTRACTF128 $1, Y6, X5
	VMAXPS       X5, X6, X6
	VPERMILPS    $0x4e, X6, X5
	VMAXPS       X5, X6, X6
	VPERMILPS    $0xb1, X6, X5
	VMAXPS       X5, X6, X6
	VBROADCASTSS X6, Y6
	VMULPS       Y7, Y6, Y6 // scale·max
	VXORPS       Y5, Y5, Y5 // lane sums
	MOVQ         SI, DI
	MOVQ         CX, R8

smExp:
	SUBQ    $8, R8
	JLT     smExpDone
	VMOVUPS (DI), Y0
	VMULPS  Y7, Y0, Y0
	VSUBPS  Y6, Y0, Y0
	EXP
	VADDPS  Y0, Y5, Y5
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	JMP     smExp

smExpDone:
	VEXTRACTF128 $1, Y5, X4
	VADDPS       X4, X5, X5
	VPERMILPS    $0x4e, X5, X4
	VADDPS       X4, X5, X5
	VPERMILPS    $0xb1, X5, X4
	VADDPS       X4, X5, X5
	VBROADCASTSS X5, Y5
	VDIVPS       Y5, Y15, Y5 // 1/sum

smNorm:
	SUBQ    $8, CX
	JLT     smDone
	VMULPS  (SI), Y5, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	JMP     smNorm

smDone:
	VZEROUPPER
	RET

// func kern4x32(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
// C[0:4, 0:32] += A[0:4, 0:k] · B[0:k, 0:32] (kern4x16 on 512-bit registers); needs AVX-512F.
TEXT ·kern4x32(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R9
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R10
	SHLQ $2, R8
	SHLQ $2, R9
	SHLQ $2, R10
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	LEAQ (SI)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	XORQ AX, AX

k32loop:
	TESTQ        CX, CX
	JEQ          k32done
	VMOVUPS      (DI), Z8
	VMOVUPS      64(DI), Z9
	VBROADCASTSS (SI)(AX*1), Z10
	VFMADD231PS  Z8, Z10, Z0
	VFMADD231PS  Z9, Z10, Z1
	VBROADCASTSS (R11)(AX*1), Z11
	VFMADD231PS  Z8, Z11, Z2
	VFMADD231PS  Z9, Z11, Z3
	VBROADCASTSS (R12)(AX*1), Z12
	VFMADD231PS  Z8, Z12, Z4
	VFMADD231PS  Z9, Z12, Z5
	VBROADCASTSS (R13)(AX*1), Z13
	VFMADD231PS  Z8, Z13, Z6
	VFMADD231PS  Z9, Z13, Z7
	ADDQ         $4, AX
	ADDQ         R9, DI
	DECQ         CX
	JMP          k32loop

k32done:
	VADDPS  (DX), Z0, Z0
	VMOVUPS Z0, (DX)
	VADDPS  64(DX), Z1, Z1
	VMOVUPS Z1, 64(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Z2, Z2
	VMOVUPS Z2, (DX)
	VADDPS  64(DX), Z3, Z3
	VMOVUPS Z3, 64(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Z4, Z4
	VMOVUPS Z4, (DX)
	VADDPS  64(DX), Z5, Z5
	VMOVUPS Z5, 64(DX)
	ADDQ    R10, DX
	VADDPS  (DX), Z6, Z6
	VMOVUPS Z6, (DX)
	VADDPS  64(DX), Z7, Z7
	VMOVUPS Z7, 64(DX)
	VZEROUPPER
	RET
