//go:build !amd64 || noasm

package vlm

const (
	hasKernel    = false
	hasKernel512 = false
)

func kern4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int) {
	panic("vlm: kern4x16 without assembly")
}

func axpyRows(k int, a *float32, b *float32, ldb int, c *float32, n int) {
	panic("vlm: axpyRows without assembly")
}

func geluFwd(n int, u, a *float32)                { panic("vlm: geluFwd without assembly") }
func geluBwd(n int, u, da *float32)               { panic("vlm: geluBwd without assembly") }
func softmaxRow(n int, x *float32, scale float32) { panic("vlm: softmaxRow without assembly") }

func kern4x32(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int) {
	panic("vlm: kern4x32 without assembly")
}
