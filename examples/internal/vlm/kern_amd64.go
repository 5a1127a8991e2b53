//go:build !noasm

package vlm

import "golang.org/x/sys/cpu"

// kern4x16 adds A[0:4, 0:k]·B[0:k, 0:16] to C[0:4, 0:16] (AVX2+FMA; strides in elements).
//
//go:noescape
func kern4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// axpyRows adds Σ_{p<k} a[p]·b[p·ldb : p·ldb+n] to c[0:n], n a multiple of 8 (AVX2+FMA).
//
//go:noescape
func axpyRows(k int, a *float32, b *float32, ldb int, c *float32, n int)

// geluFwd sets a[i] = u[i]·σ(1.702·u[i]) for i < n, n a multiple of 8; a may be u.
//
//go:noescape
func geluFwd(n int, u, a *float32)

// geluBwd multiplies da[i] by GELU's derivative at u[i] for i < n, n a multiple of 8.
//
//go:noescape
func geluBwd(n int, u, da *float32)

// softmaxRow sets x[0:n] = softmax(scale·x[0:n]), n a multiple of 8; −Inf lanes give 0.
//
//go:noescape
func softmaxRow(n int, x *float32, scale float32)

// kern4x32 is kern4x16 for 32 columns on AVX-512 registers.
//
//go:noescape
func kern4x32(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

var (
	hasKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	// hasKernel512 selects kern4x32 for the GEMM's 32-column blocks.
	hasKernel512 = hasKernel && cpu.X86.HasAVX512F
)
