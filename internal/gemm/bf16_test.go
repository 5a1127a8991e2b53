package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/cputime"
)

func TestAsmUpToDateBF16(t *testing.T) { asmcheck.UpToDate(t, "gemmbf16", "gemm") }

// toBF16 rounds f to the nearest bfloat16 (ties to even; no NaN in these tests).
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func randBF16(r *rand.Rand, n int) []uint16 {
	x := make([]uint16, n)
	for i := range x {
		x[i] = toBF16(float32(r.NormFloat64()))
	}
	return x
}

// TestMulBF16 checks every bfloat16 implementation against the float64 product at shapes with
// partial row groups and panels, odd K (a padded last pair), several K blocks and more rows than
// MBlock, row strides wider than K, overwriting and accumulating. The inputs are bfloat16, so
// every product a·w is exact in float32 (8-bit significands): the only error is the rounding of
// the float32 additions along an element's chain, at most k (the terms, pairs included) plus one
// per K block plus one for acc, each within 2⁻²⁴ of the running sum, hence
// |err| ≤ adds·2⁻²⁴·(Σ|a·w| + |c₀|) to first order (×1.01 for the higher-order terms).
func TestMulBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, name := range ImplsBF16() {
		for _, s := range [][3]int{{1, 1, 1}, {1, 64, 2}, {5, 63, 127}, {6, 64, 128}, {7, 65, 129}, {13, 150, 601}, {2, 16, 0}, {390, 70, 33}, {32, 130, 896}} {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", name, m, n, k), func(t *testing.T) {
				defer UseBF16(name)()
				lda, ldc := k+3, n+5
				a, w := randBF16(r, m*lda), randBF16(r, n*k)
				c0 := make([]float32, m*ldc)
				for i := range c0 {
					c0[i] = float32(r.NormFloat64())
				}
				p := PackBF16(n, k, w)
				blocks := (k + KBlockBF16 - 1) / KBlockBF16
				for _, acc := range []bool{false, true} {
					c := append([]float32(nil), c0...)
					MulBF16(m, a, lda, p, c, ldc, acc)
					for i := range m {
						for j := range ldc {
							got := c[i*ldc+j]
							if j >= n {
								if got != c0[i*ldc+j] {
									t.Fatalf("acc=%v: c[%d,%d] (past N) changed", acc, i, j)
								}
								continue
							}
							var want, sum float64
							adds := k + blocks
							if acc {
								want, sum = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
								adds++
							}
							for pp := range k {
								x := float64(bf16f(a[i*lda+pp])) * float64(bf16f(w[j*k+pp]))
								want += x
								sum += math.Abs(x)
							}
							if d := math.Abs(float64(got) - want); !(d <= 1.01*float64(adds)*0x1p-24*sum) {
								t.Fatalf("acc=%v: c[%d,%d] = %v, want %v (error %g, bound %g)", acc, i, j, got, want, d, 1.01*float64(adds)*0x1p-24*sum)
							}
						}
					}
				}
			})
		}
	}
}

// TestMulBF16MatchesTwin: the VDPBF16PS kernels and the pure-Go twin add the same exact
// products in the same order (odd element, then even, of each pair), so with normal inputs they
// agree bit for bit.
func TestMulBF16MatchesTwin(t *testing.T) {
	names := ImplsBF16()
	if len(names) == 1 {
		t.Skip("SKIP: no VDPBF16PS on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 8))
	m, n, k := 11, 200, 517
	a, w := randBF16(r, m*k), randBF16(r, n*k)
	p := PackBF16(n, k, w)
	want := make([]float32, m*n)
	func() {
		defer UseBF16("go")()
		MulBF16(m, a, k, p, want, n, false)
	}()
	for _, name := range names[:len(names)-1] {
		defer UseBF16(name)()
		got := make([]float32, m*n)
		MulBF16(m, a, k, p, got, n, false)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: element %d = %v, the twin's %v", name, i, got[i], want[i])
			}
		}
	}
}

// TestMulRangeBF16 checks a block of rows and columns of W (k0 even, k1 odd) against MulBF16 of
// the same block packed on its own.
func TestMulRangeBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 7, 200, 600
	a, w := randBF16(r, m*k), randBF16(r, n*k)
	p := PackBF16(n, k, w)
	for _, name := range ImplsBF16() {
		defer UseBF16(name)()
		n0, n1, k0, k1 := 64, 171, 38, 589
		got := make([]float32, m*(n1-n0))
		MulRangeBF16(m, a[k0:], k, p, n0, n1, k0, k1, got, n1-n0, false)
		sub := make([]uint16, (n1-n0)*(k1-k0))
		for j := range n1 - n0 {
			copy(sub[j*(k1-k0):], w[(n0+j)*k+k0:(n0+j)*k+k1])
		}
		want := make([]float32, m*(n1-n0))
		MulBF16(m, a[k0:], k, PackBF16(n1-n0, k1-k0, sub), want, n1-n0, false)
		for i := range want {
			if got[i] != want[i] { // the same K blocks from k0: the same sums, bit for bit
				t.Fatalf("%s: element %d = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}

// TestPackTBF16: PackTBF16Into(x) equals PackBF16 of x's transpose, for odd rows (a padded
// pair) and a partial panel, also into a reused buffer.
func TestPackTBF16(t *testing.T) {
	rows, cols := 5, 130
	x := make([]uint16, rows*cols)
	for i := range x {
		x[i] = uint16(i + 1)
	}
	xt := make([]uint16, rows*cols)
	for r := range rows {
		for c := range cols {
			xt[c*rows+r] = x[r*cols+c]
		}
	}
	want := PackBF16(cols, rows, xt)
	// into a reused buffer full of garbage: the padding must come out zero again
	junk := &PackedBF16{panels: make([]uint16, len(want.panels)+7)}
	for i := range junk.panels {
		junk.panels[i] = 0xffff
	}
	got := PackTBF16Into(junk, rows, cols, x)
	if &got.panels[0] != &junk.panels[0] {
		t.Fatal("PackTBF16Into did not reuse a large enough buffer")
	}
	if got.N != want.N || got.K != want.K || len(got.panels) != len(want.panels) {
		t.Fatalf("shape %d×%d (%d), want %d×%d (%d)", got.N, got.K, len(got.panels), want.N, want.K, len(want.panels))
	}
	for i := range want.panels {
		if got.panels[i] != want.panels[i] {
			t.Fatalf("panel element %d = %d, want %d", i, got.panels[i], want.panels[i])
		}
	}
}

// BenchmarkTileBF16L1 times the 6×64 VDPBF16PS micro-kernel alone on operands that stay in L1
// (one A block of 6 rows and one pair-panel block, KBlockBF16 long, C accumulated): the
// kernel's ceiling, against BenchmarkFMAPeak/avx512bf16's register-only peak; what MulBF16
// loses below it is the memory hierarchy's and the loops'.
func BenchmarkTileBF16L1(b *testing.B) {
	k := bf16Impls.Active()
	if k == nil {
		b.Skip("no AVX512_BF16")
	}
	a := make([]uint16, MR*KBlockBF16)
	panel := make([]uint16, KBlockBF16*Panel)
	c := make([]float32, MR*Panel)
	cpu0, _ := cputime.Process()
	for b.Loop() {
		for range 1000 {
			k.tile[MR](KBlockBF16/2, &a[0], KBlockBF16, &panel[0], 2*Panel, &c[0], Panel, true)
		}
	}
	reportCPU(b, cpu0, 2*MR*Panel*KBlockBF16*1000*float64(b.N))
}
