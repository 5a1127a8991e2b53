package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

// TestBF16ConvAsmUpToDate fails when bf16conv_amd64.s or its stubs differ from what
// internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestBF16ConvAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "bf16conv", "tensor") }

// TestBF16Conv: every implementation of widenBF16 and roundBF16 (the vector kernels and the Go
// loops) equals the scalar definitions (BF16.Float32, BF16FromFloat32) bit for bit, on random
// bit patterns and on the special cases — ties to even both ways, a carry into the exponent,
// overflow to Inf, subnormals, signed zeros, infinities, quiet and signalling NaNs — at lengths
// around the lane counts (the Go tail).
func TestBF16Conv(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	special := []uint32{0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f7fffff, 0x7f7fffff, 0x7f7f8000, 0x00008000,
		0x00018000, 0x00000001, 0x807fffff, 0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
		0xff810000, 0x7fbfffff, 0xffffffff}
	for _, im := range convImpls.Impls() {
		restore := convImpls.Use(im.Name)
		for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 129, 1000} {
			src := make([]float32, n)
			for i := range src {
				b := r.Uint32()
				if i < len(special) && n > 20 {
					b = special[i]
				}
				src[i] = math.Float32frombits(b)
			}
			got := make([]BF16, n+1) // one past the end must stay 0
			roundBF16(got[:n], src)
			for i, f := range src {
				if want := BF16FromFloat32(f); got[i] != want {
					t.Fatalf("%s: round(%#08x) = %#04x, want %#04x (n = %d)", im.Name, math.Float32bits(f), got[i], want, n)
				}
			}
			if got[n] != 0 {
				t.Fatalf("%s: round wrote past n = %d", im.Name, n)
			}
			w := make([]float32, n+1)
			widenBF16(w[:n], got[:n])
			for i, h := range got[:n] {
				if math.Float32bits(w[i]) != math.Float32bits(h.Float32()) {
					t.Fatalf("%s: widen(%#04x) = %#08x", im.Name, h, math.Float32bits(w[i]))
				}
			}
			if w[n] != 0 {
				t.Fatalf("%s: widen wrote past n = %d", im.Name, n)
			}
		}
		restore()
	}
	if len(convImpls.Impls()) < 2 {
		t.Log("no vector conversions on this build or CPU: only the Go loops were tested")
	}
}

// TestBF16WidenAllPatterns checks the vector bfloat16 widening (widenBF16's kernels, which
// attention and the other op families use) against the exact scalar one on
// every bit pattern (NaNs, infinities, subnormals, signed zeros), at lengths with and without a
// tail, and that it writes nothing past the whole vectors it covers.
func TestBF16WidenAllPatterns(t *testing.T) {
	impls := convImpls.SIMD()
	if len(impls) == 0 {
		t.Skip("no SIMD implementation in this build or on this CPU (pure Go only)")
	}
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, im := range impls {
		for _, n := range []int{0, 7, 8, 16, 63, 64, 100, len(src)} {
			dst := make([]float32, n+1)
			for i := range dst {
				dst[i] = -1
			}
			whole := n &^ (im.Kernels.lanes - 1)
			im.Kernels.widen(dst[:whole], src[:whole])
			for i := range whole {
				if w := BF16(src[i]).Float32(); math.Float32bits(dst[i]) != math.Float32bits(w) {
					t.Fatalf("%s n=%d: dst[%d] = %#x, want %#x", im.Name, n, i, math.Float32bits(dst[i]), math.Float32bits(w))
				}
			}
			for i := whole; i <= n; i++ {
				if dst[i] != -1 {
					t.Fatalf("%s n=%d: dst[%d] written (%v) past the %d elements of whole vectors", im.Name, n, i, dst[i], whole)
				}
			}
		}
	}
}
