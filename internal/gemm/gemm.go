package gemm

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// Panel is the number of output columns of a packed panel.
const Panel = 64

// KBlock is how many rows of K one micro-kernel call covers: a 32 KiB block of a panel.
const KBlock = 128

// MR is the most rows of A a micro-kernel call handles.
const MR = 6

// tileFn is a micro-kernel: the mr×width tile C = A·B (C += A·B when acc), strides in elements.
type tileFn func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

// kernels is one implementation's micro-kernels, indexed by the number of rows (1..MR).
type kernels struct {
	width int // columns per call: 64 or 16
	tile  [MR + 1]tileFn
}

var impls = dispatch.New(simdImpls()...)

// Impls lists the implementations this build and CPU can run, best first; "go" is last.
func Impls() []string { return impls.Names() }

// Use selects an implementation by name until restore is called (tests and benchmarks).
func Use(name string) (restore func()) { return impls.Use(name) }

// SIMD reports whether a vector implementation is selected (not the pure-Go twin).
func SIMD() bool { return impls.Active() != nil }

// Packed is a weight W [N, K] in panel layout.
type Packed struct {
	N, K   int
	panels []float32 // ceil(N/Panel) panels of K×Panel
}

// Pack packs w [n, k] (row-major) into panels; at(i) returns element i of w, so float32 and
// bfloat16 weights share the code.
func Pack(n, k int, at func(i int) float32) *Packed {
	np := (n + Panel - 1) / Panel
	p := &Packed{N: n, K: k, panels: make([]float32, np*k*Panel)}
	parallel.For(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			dst := p.panels[q*k*Panel : (q+1)*k*Panel]
			for j := range min(Panel, n-q*Panel) {
				row := (q*Panel + j) * k
				for pp := range k {
					dst[pp*Panel+j] = at(row + pp)
				}
			}
		}
	})
	return p
}

// MBlock is how many rows of A a pass over a group of panels covers: the A block (MBlock×KBlock,
// 192 KiB) and the C tile (MBlock×PanelGroup·Panel, 384 KiB) stay in L2 while the group's panel
// blocks are reused from L1.
const MBlock = 384

// PanelGroup is how many panels one goroutine takes at a time.
const PanelGroup = 4

// Mul computes c = a·Wᵀ (c += a·Wᵀ when acc) for a [m, K] with row stride lda and c [m, N]
// with row stride ldc.
func Mul(m int, a []float32, lda int, p *Packed, c []float32, ldc int, acc bool) {
	if m == 0 || p.N == 0 {
		return
	}
	k := impls.Active()
	if k == nil {
		k = &goKernels
	}
	np := (p.N + Panel - 1) / Panel
	parallel.For(np, PanelGroup, func(q0, q1 int) {
		var scratch [MR * Panel]float32
		if p.K == 0 && !acc {
			for i := range m {
				clear(c[i*ldc+q0*Panel : i*ldc+min(q1*Panel, p.N)])
			}
		}
		for i0 := 0; i0 < m; i0 += MBlock {
			i1 := min(i0+MBlock, m)
			for k0 := 0; k0 < p.K; k0 += KBlock {
				kb := min(KBlock, p.K-k0)
				add := acc || k0 > 0
				for q := q0; q < q1; q++ {
					ncols := min(Panel, p.N-q*Panel)
					panel := p.panels[(q*p.K+k0)*Panel:]
					for i := i0; i < i1; i += MR {
						mr := min(MR, i1-i)
						k.rows(mr, kb, &a[i*lda+k0], lda, panel, c[i*ldc+q*Panel:], ldc, ncols, add, scratch[:])
					}
				}
			}
		}
	})
}

// rows multiplies mr rows of A (kb columns) by the first ncols columns of a panel block into c,
// in calls of the kernels' width; a partial last call goes through scratch.
func (k *kernels) rows(mr, kb int, a *float32, lda int, panel []float32, c []float32, ldc, ncols int, add bool, scratch []float32) {
	for j0 := 0; j0 < ncols; j0 += k.width {
		if j0+k.width <= ncols {
			k.tile[mr](kb, a, lda, &panel[j0], Panel, &c[j0], ldc, add)
			continue
		}
		w := ncols - j0
		for i := range mr {
			copy(scratch[i*k.width:i*k.width+w], c[i*ldc+j0:i*ldc+j0+w])
		}
		k.tile[mr](kb, a, lda, &panel[j0], Panel, &scratch[0], k.width, add)
		for i := range mr {
			copy(c[i*ldc+j0:i*ldc+j0+w], scratch[i*k.width:i*k.width+w])
		}
	}
}

// goKernels is the pure-Go twin of the vector micro-kernels: the same tile loops, 16 columns.
var goKernels = func() kernels {
	k := kernels{width: 16}
	for mr := 1; mr <= MR; mr++ {
		k.tile[mr] = func(kk int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool) {
			tileGo(mr, 16, kk, a, lda, b, ldb, c, ldc, acc)
		}
	}
	return k
}()

func tileGo(mr, w, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool) {
	as := unsafe.Slice(a, (mr-1)*lda+k)
	bs := unsafe.Slice(b, max(0, (k-1)*ldb+w))
	cs := unsafe.Slice(c, (mr-1)*ldc+w)
	var t [MR * Panel]float32
	for p := range k {
		brow := bs[p*ldb : p*ldb+w]
		for i := range mr {
			ai := as[i*lda+p]
			ti := t[i*w : i*w+w]
			for j, bv := range brow {
				ti[j] += float32(ai * bv)
			}
		}
	}
	for i := range mr {
		ci := cs[i*ldc : i*ldc+w]
		for j := range ci {
			if acc {
				ci[j] += t[i*w+j]
			} else {
				ci[j] = t[i*w+j]
			}
		}
	}
}
