package tensor_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestBulkBF16Conversions: RoundToBF16, WidenBF16 and RoundFloat32s equal the scalar
// BF16FromFloat32 and BF16.Float32 bit for bit on random bit patterns (NaNs, infinities and
// subnormals among them), at lengths around the vector lanes, the in-place chunk (1024) and the
// parallel grain (2¹⁵), and write nothing past len(src).
func TestBulkBF16Conversions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 15, 17, 1023, 1025, 3000, 1<<15 + 3, 3<<15 + 5} {
		src := make([]float32, n)
		for i := range src {
			src[i] = math.Float32frombits(r.Uint32())
		}
		b := make([]tensor.BF16, n+1)
		tensor.RoundToBF16(b, src)
		w := make([]float32, n+1)
		tensor.WidenBF16(w, b[:n])
		v := append(append([]float32(nil), src...), 42)
		tensor.RoundFloat32s(v[:n])
		for i, f := range src {
			want := tensor.BF16FromFloat32(f)
			if b[i] != want {
				t.Fatalf("n=%d: RoundToBF16 %#08x = %#04x, want %#04x", n, math.Float32bits(f), b[i], want)
			}
			if math.Float32bits(w[i]) != math.Float32bits(want.Float32()) {
				t.Fatalf("n=%d: WidenBF16 %#04x = %#08x", n, want, math.Float32bits(w[i]))
			}
			if math.Float32bits(v[i]) != math.Float32bits(want.Float32()) {
				t.Fatalf("n=%d: RoundFloat32s %#08x = %#08x, want %#08x", n, math.Float32bits(f), math.Float32bits(v[i]), math.Float32bits(want.Float32()))
			}
		}
		if b[n] != 0 || w[n] != 0 || v[n] != 42 {
			t.Fatalf("n=%d: wrote past the end", n)
		}
		// copy's semantics: the shorter slice sets the count
		if got := tensor.RoundToBF16(b[:n/2], src); got != n/2 {
			t.Fatalf("n=%d: RoundToBF16 into %d converted %d", n, n/2, got)
		}
		if got := tensor.WidenBF16(w, b[:n/2]); got != n/2 {
			t.Fatalf("n=%d: WidenBF16 of %d converted %d", n, n/2, got)
		}
	}
}
