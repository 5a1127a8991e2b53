package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
)

func TestAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "gemm", "gemm") }

// TestMul checks every implementation against the float64 product at shapes with partial row
// groups, partial panels and partial K blocks, with a row stride wider than K, overwriting and
// accumulating. The bound is the worst-case error of a float32 sum of k+1 terms:
// (2k+2)·2⁻²⁴·Σ|a||w|.
func TestMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range Impls() {
		for _, s := range [][3]int{{1, 1, 1}, {5, 63, 127}, {6, 64, 128}, {7, 65, 129}, {13, 150, 300}, {2, 16, 0}, {32, 896, 257}} {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", name, m, n, k), func(t *testing.T) {
				defer Use(name)()
				lda, ldc := k+3, n+5
				a, w, c0 := make([]float32, m*lda), make([]float32, n*k), make([]float32, m*ldc)
				for _, v := range [][]float32{a, w, c0} {
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
				}
				p := Pack(n, k, func(i int) float32 { return w[i] })
				for _, acc := range []bool{false, true} {
					c := append([]float32(nil), c0...)
					Mul(m, a, lda, p, c, ldc, acc)
					for i := range m {
						for j := range ldc {
							got := c[i*ldc+j]
							if j >= n { // outside the product: untouched
								if got != c0[i*ldc+j] {
									t.Fatalf("acc=%v: c[%d,%d] (past N) changed", acc, i, j)
								}
								continue
							}
							var want, bound float64
							if acc {
								want, bound = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
							}
							for pp := range k {
								x := float64(a[i*lda+pp]) * float64(w[j*k+pp])
								want += x
								bound += math.Abs(x)
							}
							if d := math.Abs(float64(got) - want); !(d <= float64(2*k+2)*0x1p-24*bound) {
								t.Fatalf("acc=%v: c[%d,%d] = %v, want %v", acc, i, j, got, want)
							}
						}
					}
				}
			})
		}
	}
}

// TestMulRowsIndependent: a row of c has the same bits whichever row group and kernel computes
// it (7-row groups where there is a 7-row kernel, 6, 1…5 and the pure-Go tile elsewhere; decode's
// panel-major walk or prefill's M blocks): each element is one chain over each K block, the
// blocks added in order. Mul of all rows is compared with Mul of one row at a time.
func TestMulRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, name := range Impls() {
		for _, m := range []int{7, 8, 13, 14, 29, 32, 33, 40, 203} {
			defer Use(name)()
			n, k := 130, 300
			a, w := make([]float32, m*k), make([]float32, n*k)
			for _, v := range [][]float32{a, w} {
				for i := range v {
					v[i] = float32(r.NormFloat64())
				}
			}
			p := PackF32(n, k, w)
			got, one := make([]float32, m*n), make([]float32, n)
			Mul(m, a, k, p, got, n, false)
			for i := range m {
				Mul(1, a[i*k:], k, p, one, n, false)
				for j := range n {
					if math.Float32bits(got[i*n+j]) != math.Float32bits(one[j]) {
						t.Fatalf("%s, m = %d: c[%d,%d] = %v, alone %v", name, m, i, j, got[i*n+j], one[j])
					}
				}
			}
		}
	}
}

// TestMulRange checks a sub-block of rows and columns of W against the same block of Mul's full
// product computed from a sliced weight.
func TestMulRange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 7, 200, 300
	a, w := make([]float32, m*k), make([]float32, n*k)
	for _, v := range [][]float32{a, w} {
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
	}
	p := Pack(n, k, func(i int) float32 { return w[i] })
	for _, name := range Impls() {
		defer Use(name)()
		n0, n1, k0, k1 := 64, 171, 37, 290
		got := make([]float32, m*(n1-n0))
		MulRange(m, a[k0:], k, p, n0, n1, k0, k1, got, n1-n0, false)
		// The same block through Mul on the weight's sub-matrix, packed on its own.
		sub := Pack(n1-n0, k1-k0, func(i int) float32 { return w[(n0+i/(k1-k0))*k+k0+i%(k1-k0)] })
		want := make([]float32, m*(n1-n0))
		Mul(m, a[k0:], k, sub, want, n1-n0, false)
		for i := range want {
			if got[i] != want[i] { // same K blocks from k0: the same sums, bit for bit
				t.Fatalf("%s: element %d = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}

// TestPackT: PackT(x) equals Pack of x's transpose, and the float32 fast paths equal the
// general ones.
func TestPackT(t *testing.T) {
	rows, cols := 5, 130
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i)
	}
	got := PackT(rows, cols, func(i int) float32 { return x[i] })
	want := Pack(cols, rows, func(i int) float32 { return x[(i%rows)*cols+i/rows] })
	samePanels(t, "PackT", got, want)
	samePanels(t, "PackTF32", PackTF32(rows, cols, x), want)
	samePanels(t, "PackF32", PackF32(rows, cols, x), Pack(rows, cols, func(i int) float32 { return x[i] }))
}

func samePanels(t *testing.T, name string, got, want *Packed) {
	t.Helper()
	if got.N != want.N || got.K != want.K || len(got.panels) != len(want.panels) {
		t.Fatalf("%s: shape %d×%d, want %d×%d", name, got.N, got.K, want.N, want.K)
	}
	for i := range want.panels {
		if got.panels[i] != want.panels[i] {
			t.Fatalf("%s: panel element %d = %v, want %v", name, i, got.panels[i], want.panels[i])
		}
	}
}

// TestUnpack reads W back from its panels (Row, Unpack) and transposes the panels (Transpose),
// at shapes with partial panels, against the row-major values and PackT's panels.
func TestUnpack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2]int{{1, 1}, {63, 5}, {64, 64}, {65, 130}, {200, 77}, {3, 0}} {
		n, k := s[0], s[1]
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		p := PackF32(n, k, w)
		got := make([]float32, n*k)
		p.Unpack(got)
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("%dx%d: Unpack[%d] = %v, want %v", n, k, i, got[i], w[i])
			}
		}
		row := make([]float32, k)
		p.Row(n-1, row)
		for j := range row {
			if row[j] != w[(n-1)*k+j] {
				t.Fatalf("%dx%d: Row(%d)[%d] = %v, want %v", n, k, n-1, j, row[j], w[(n-1)*k+j])
			}
		}
		if n > 5 { // a block of rows, into a reused buffer of another size
			want := PackTF32(n-5, k, w[3*k:(n-2)*k])
			got := TransposeInto(Transpose(p), p, 3, n-2)
			if got.N != want.N || got.K != want.K {
				t.Fatalf("%dx%d: TransposeInto is %dx%d, want %dx%d", n, k, got.N, got.K, want.N, want.K)
			}
			for i := range want.panels {
				if got.panels[i] != want.panels[i] {
					t.Fatalf("%dx%d: TransposeInto panels[%d] = %v, want %v", n, k, i, got.panels[i], want.panels[i])
				}
			}
		}
		tp, want := Transpose(p), PackTF32(n, k, w)
		if tp.N != want.N || tp.K != want.K || len(tp.panels) != len(want.panels) {
			t.Fatalf("%dx%d: Transpose is %dx%d (%d), want %dx%d (%d)", n, k, tp.N, tp.K, len(tp.panels), want.N, want.K, len(want.panels))
		}
		for i := range want.panels {
			if tp.panels[i] != want.panels[i] {
				t.Fatalf("%dx%d: Transpose panels[%d] = %v, want %v", n, k, i, tp.panels[i], want.panels[i])
			}
		}
	}
}

// TestMoveOffHeap multiplies with panels moved out of the Go heap: the same products, and the
// memory is unmapped without fault once the Packed is collected.
func TestMoveOffHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const m, n, k = 5, 70, 33
	a, w := make([]float32, m*k), make([]float32, n*k)
	for _, v := range [][]float32{a, w} {
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
	}
	want, got := make([]float32, m*n), make([]float32, m*n)
	Mul(m, a, k, PackF32(n, k, w), want, n, false)
	p := PackF32(n, k, w)
	moved := p.MoveOffHeap()
	t.Logf("moved off the heap: %v", moved)
	Mul(m, a, k, p, got, n, false)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("c[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	row := make([]float32, k)
	p.Row(n-1, row)
	for j := range row {
		if row[j] != w[(n-1)*k+j] {
			t.Fatalf("Row(%d)[%d] = %v, want %v", n-1, j, row[j], w[(n-1)*k+j])
		}
	}
	p = nil
	runtime.GC()
	runtime.GC()
}
