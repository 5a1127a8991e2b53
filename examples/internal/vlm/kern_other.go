//go:build !amd64 || noasm

package vlm

const hasKernel = false

func kern4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int) {
	panic("vlm: kern4x16 without assembly")
}
