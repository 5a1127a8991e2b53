//go:build !noasm

package vlm

import "golang.org/x/sys/cpu"

// kern4x16 adds A[0:4, 0:k]·B[0:k, 0:16] to C[0:4, 0:16] (AVX2+FMA; strides in elements).
//
//go:noescape
func kern4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

var hasKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA
