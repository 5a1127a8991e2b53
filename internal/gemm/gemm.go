package gemm

import (
	"math"
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
	// tile7 multiplies 7 rows by a whole panel (AVX-512: 28 accumulators, A's elements as
	// embedded-broadcast operands; nil elsewhere). Where it exists, Mul takes rows 7 at a time:
	// 28 FMAs per panel row loaded instead of 24, and at decode (M = 7, 8) one pass over the
	// weight streaming from memory instead of a 6-row pass and a 1- or 2-row one.
	tile7 tileFn
	// pf are the decode kernels of 1…4 and 7 rows (AVX-512; nil elsewhere): tile and tile7
	// that also prefetch weight lines ahead.
	pf [MR + 2]pfFn
}

// pfFn is a decode micro-kernel: tileFn that also prefetches pfstep/64 cache lines (at most 8)
// from address pf on per two steps of k, advancing pf by pfstep.
type pfFn func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool, pf uintptr, pfstep int)

var impls = dispatch.New(simdImpls()...)

// Impls lists the implementations this build and CPU can run, best first; "go" is last.
func Impls() []string { return impls.Names() }

// Use selects an implementation by name until restore is called (tests and benchmarks).
func Use(name string) (restore func()) { return impls.Use(name) }

// SIMD reports whether a vector implementation is selected (not the pure-Go twin).
func SIMD() bool { return impls.Active() != nil }

// Packed is a weight W [N, K] in panel layout.
type Packed struct {
	N, K    int
	panels  []float32 // ceil(N/Panel) panels of K×Panel
	offHeap bool      // panels are anonymous memory (MoveOffHeap)
}

// Pack packs w [n, k] (row-major) into panels; at(i) returns element i of w, so float32 and
// bfloat16 weights share the code. PackF32 is the same for a float32 slice, faster.
func Pack(n, k int, at func(i int) float32) *Packed {
	return pack(n, k, func(dst []float32, row, k int) {
		for pp := range k {
			dst[pp*Panel] = at(row*k + pp)
		}
	})
}

// PackF32 is Pack of a float32 slice w [n, k].
func PackF32(n, k int, w []float32) *Packed {
	return pack(n, k, func(dst []float32, row, k int) {
		for pp, v := range w[row*k : row*k+k] {
			dst[pp*Panel] = v
		}
	})
}

// pack lays out the panels; column fills output column j of a panel (dst[pp*Panel] is row pp)
// from row `row` of the weight.
func pack(n, k int, column func(dst []float32, row, k int)) *Packed {
	np := (n + Panel - 1) / Panel
	p := &Packed{N: n, K: k, panels: make([]float32, np*k*Panel)}
	if k == 0 {
		return p
	}
	parallel.For(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			dst := p.panels[q*k*Panel : (q+1)*k*Panel]
			for j := range min(Panel, n-q*Panel) {
				column(dst[j:], q*Panel+j, k)
			}
		}
	})
	return p
}

// PackT packs the transpose of x [rows, cols] (row-major, element i read by at): the result
// multiplies as a [cols, rows] weight, so Mul computes a·x. The panels are filled row by row of
// x, reading 64 contiguous elements at a time.
func PackT(rows, cols int, at func(i int) float32) *Packed { return packT(rows, cols, at, nil) }

// PackTF32 is PackT of a float32 slice x [rows, cols].
func PackTF32(rows, cols int, x []float32) *Packed { return packT(rows, cols, nil, x) }

// PackTInto is PackT of x [rows, cols], float32 or bfloat16 bits (widened exactly), into dst's
// storage when it is large enough (a new Packed otherwise; dst may be nil): callers that pack
// one block of a large matrix at a time reuse one buffer.
func PackTInto[T float32 | ~uint16](dst *Packed, rows, cols int, x []T) *Packed {
	np := (cols + Panel - 1) / Panel
	var p *Packed
	if dst != nil && cap(dst.panels) >= np*rows*Panel {
		p = &Packed{N: cols, K: rows, panels: dst.panels[:np*rows*Panel]}
	}
	if v, ok := any(x).([]float32); ok {
		return packTTo(p, rows, cols, nil, v, nil)
	}
	return packTTo(p, rows, cols, nil, nil, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(x))), len(x)))
}

func packT(rows, cols int, at func(i int) float32, x []float32) *Packed {
	return packTTo(nil, rows, cols, at, x, nil)
}

// packTTo fills p (allocated when nil) with the panels of x's transpose, reading x (float32),
// xb (bfloat16 bits) or, when both are nil, at.
func packTTo(p *Packed, rows, cols int, at func(i int) float32, x []float32, xb []uint16) *Packed {
	np := (cols + Panel - 1) / Panel
	if p == nil {
		p = &Packed{N: cols, K: rows, panels: make([]float32, np*rows*Panel)}
	}
	parallel.For(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			dst := p.panels[q*rows*Panel : (q+1)*rows*Panel]
			w := min(Panel, cols-q*Panel)
			for r := range rows {
				row := dst[r*Panel : r*Panel+w]
				clear(dst[r*Panel+w : (r+1)*Panel]) // a reused buffer's padding
				if x != nil {
					copy(row, x[r*cols+q*Panel:])
					continue
				}
				if xb != nil {
					for j, h := range xb[r*cols+q*Panel : r*cols+q*Panel+w] {
						row[j] = math.Float32frombits(uint32(h) << 16)
					}
					continue
				}
				for j := range row {
					row[j] = at(r*cols + q*Panel + j)
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

// mBlock7 is MBlock for kernels with tile7: 28 groups of 7 rows, an A block of 98 KiB and a C
// tile of 196 KiB, which leave more of L2 to other processes' lines on a shared core (measured
// 3–7 % faster at K = 896 on a loaded Zen 4 than 384 rows).
const mBlock7 = 196

// PanelGroup is how many panels one goroutine takes at a time.
const PanelGroup = 4

// Mul computes c = a·Wᵀ (c += a·Wᵀ when acc) for a [m, K] with row stride lda and c [m, N]
// with row stride ldc, in parallel over groups of panels.
func Mul(m int, a []float32, lda int, p *Packed, c []float32, ldc int, acc bool) {
	if m == 0 || p.N == 0 {
		return
	}
	k := active()
	np := (p.N + Panel - 1) / Panel
	parallel.For(np, PanelGroup, func(q0, q1 int) {
		k.panels(m, a, lda, p, q0*Panel, min(q1*Panel, p.N), 0, p.K, c[q0*Panel:], ldc, acc)
	})
}

// MulRange computes, on the calling goroutine, c (+)= a·W[n0:n1, k0:k1]ᵀ: a is [m, k1−k0] with
// row stride lda, c is [m, n1−n0] with row stride ldc. n0 must be a multiple of Panel. It is the
// building block of callers that parallelise themselves (the fused LM head).
func MulRange(m int, a []float32, lda int, p *Packed, n0, n1, k0, k1 int, c []float32, ldc int, acc bool) {
	if m == 0 || n1 <= n0 {
		return
	}
	active().panels(m, a, lda, p, n0, n1, k0, k1, c, ldc, acc)
}

func active() *kernels {
	if k := impls.Active(); k != nil {
		return k
	}
	return &goKernels
}

// panels is MulRange on the calling goroutine, walking M in blocks of MBlock (mBlock7) and K in
// blocks of KBlock so that the panel block stays in L1 and the A block and C tile in L2 (for at
// most DecodeRows rows, panel by panel). Either way an element's K blocks are added in ascending
// order, and each is one FMA chain whichever kernel and row group computes it.
func (k *kernels) panels(m int, a []float32, lda int, p *Packed, n0, n1, k0, k1 int, c []float32, ldc int, acc bool) {
	var scratch [MR * Panel]float32
	if k1 == k0 && !acc {
		for i := range m {
			clear(c[i*ldc : i*ldc+n1-n0])
		}
	}
	block := func(i0, i1, kk, q int) {
		kb := min(KBlock, k1-kk)
		add := acc || kk > k0
		panel := p.panels[(q*p.K+kk)*Panel:]
		ncols := min(Panel, n1-q*Panel)
		for i := i0; i < i1; {
			if i1-i >= 7 && ncols == Panel && k.tile7 != nil {
				k.tile7(kb, &a[i*lda+kk-k0], lda, &panel[0], Panel, &c[i*ldc+q*Panel-n0], ldc, add)
				i += 7
				continue
			}
			mr := min(MR, i1-i)
			k.rows(mr, kb, &a[i*lda+kk-k0], lda, panel, c[i*ldc+q*Panel-n0:], ldc, ncols, add, scratch[:])
			i += mr
		}
	}
	if m <= DecodeRows { // panel-major: one contiguous stream of weight per goroutine
		prefetch := k.pf[1] != nil && m > (decodePrefetchGroups-1)*7
		for q := n0 / Panel; q*Panel < n1; q++ {
			for kk := k0; kk < k1; kk += KBlock {
				if !prefetch || min(Panel, n1-q*Panel) < Panel {
					block(0, m, kk, q)
					continue
				}
				// The weight is one contiguous run: the block decodePrefetchBlocks ahead starts
				// that many blocks' bytes past this one (past the end of the panels the
				// prefetches are harmless). Its 512 lines are spread over the row groups' calls.
				kb := min(KBlock, k1-kk)
				panel := p.panels[(q*p.K+kk)*Panel:]
				pf := uintptr(unsafe.Pointer(&panel[0])) + decodePrefetchBlocks*KBlock*Panel*4
				groups := (m + 6) / 7
				for i, g := 0, 0; i < m; g++ {
					mr := min(7, m-i)
					lines := 8 / groups // per two steps, 8 in all
					if g < 8%groups {
						lines++
					}
					k.pf[mr](kb, &a[i*lda+kk-k0], lda, &panel[0], Panel, &c[i*ldc+q*Panel-n0], ldc, acc || kk > k0, pf, 64*lines)
					pf += uintptr(64 * lines * (kb / 2))
					i += mr
				}
			}
		}
		return
	}
	mb := MBlock
	if k.tile7 != nil {
		mb = mBlock7
	}
	for i0 := 0; i0 < m; i0 += mb {
		i1 := min(i0+mb, m)
		for kk := k0; kk < k1; kk += KBlock {
			for q := n0 / Panel; q*Panel < n1; q++ {
				block(i0, i1, kk, q)
			}
		}
	}
}

// DecodeRows is the most rows of A (decode: a few tokens) for which Mul walks one panel over all
// of K before the next: the weight, read once per call, then streams from memory as one
// contiguous run per goroutine, and the rows of A (at most 32×K) stay in L2.
const DecodeRows = 32

// Decode prefetch: from decodePrefetchGroups row groups of 7 up (M ≥ 29; the last group then has
// 1…4 rows, the decode kernels there are), each K block's calls also prefetch (PREFETCHT0) the
// weight block decodePrefetchBlocks ahead. The first call over a block reads it from memory and
// the others from L1; without the prefetch the memory idles while they run, since the hardware
// prefetchers follow the demand loads. With fewer row groups a block takes less time, the
// prefetches wait on full miss buffers (where a profile puts the time) or compete with the first
// call's loads: on Zen 4 M = 8 ran 5–30 % slower with them, M = 16 and 24 −12 to +8 %, M = 32
// 5–14 % faster.
const (
	decodePrefetchGroups = 5
	decodePrefetchBlocks = 2
)

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
