package gemm

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The bfloat16 GEMM: C[M, N] (float32) = A[M, K] · Wᵀ with A and W bfloat16, for CPUs with
// AVX512_BF16, whose VDPBF16PS multiplies pairs of bfloat16 and adds both products into a
// float32 lane. The product of two bfloat16 is exact in float32, so the result differs from the
// float32 GEMM of the widened operands only in how the float32 sums round; the weight streams
// at half the bytes (what decode, which reads the whole weight per token, is bound by).
//
// W is packed into panels of 64 output columns as the float32 GEMM's, but in pair rows: pair row
// p of a panel holds, for each column j, W[j, 2p] and W[j, 2p+1] side by side (a zero pads an
// odd K). The micro-kernels (internal/asmgen, gemmbf16 family) keep the 6×64 tile of C in 24 zmm
// registers and broadcast the pair A[i, 2p:2p+2] as one 32-bit word. Each element of C is
// summed over K in ascending pairs — acc += a[2p+1]·w[2p+1], then acc += a[2p]·w[2p], each
// rounded to float32 (VDPBF16PS's order), an odd K's last element after the pairs — over blocks
// of KBlockBF16 added in order, so results do not depend on GOMAXPROCS. VDPBF16PS treats
// subnormal inputs as zero and flushes subnormal sums to zero; the pure-Go twin keeps them.

// KBlockBF16 is how many elements of K one bfloat16 micro-kernel call covers: a 32 KiB block of
// a pair panel.
const KBlockBF16 = 256

// tileBF16Fn is a bfloat16 micro-kernel: the mr×64 tile C = A·B (C += A·B when acc) over kp
// pairs; lda and ldb in bfloat16 elements, ldc in float32 elements.
type tileBF16Fn func(kp int, a *uint16, lda int, b *uint16, ldb int, c *float32, ldc int, acc bool)

// kernelsBF16 is one implementation's bfloat16 micro-kernels, indexed by rows (1..MR).
type kernelsBF16 struct{ tile [MR + 1]tileBF16Fn }

var bf16Impls = dispatch.New(simdBF16Impls()...)

// ImplsBF16 lists the bfloat16 implementations this build and CPU can run, best first; "go",
// the pure-Go twin, is last.
func ImplsBF16() []string { return bf16Impls.Names() }

// UseBF16 selects a bfloat16 implementation by name until restore is called (tests, benchmarks).
func UseBF16(name string) (restore func()) { return bf16Impls.Use(name) }

// BF16 reports whether a vector bfloat16 implementation (VDPBF16PS) is selected. Without one,
// callers should widen bfloat16 to float32 and use Mul: the pure-Go twin is a reference, slower
// than the float32 vector kernels.
func BF16() bool { return bf16Impls.Active() != nil }

// PackedBF16 is a bfloat16 weight W [N, K] in pair-panel layout.
type PackedBF16 struct {
	N, K   int
	panels []uint16 // ceil(N/Panel) panels of ceil(K/2) pair rows × Panel columns × 2
}

// pairs is the number of pair rows of a panel.
func (p *PackedBF16) pairs() int { return (p.K + 1) / 2 }

// Bytes is the size of the packed panels in bytes.
func (p *PackedBF16) Bytes() int { return 2 * len(p.panels) }

// PackBF16 packs the bfloat16 weight w [n, k] (row-major bit patterns).
func PackBF16[T ~uint16](n, k int, w []T) *PackedBF16 {
	kp := (k + 1) / 2
	np := (n + Panel - 1) / Panel
	p := &PackedBF16{N: n, K: k, panels: make([]uint16, np*kp*2*Panel)}
	parallel.For(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			dst := p.panels[q*kp*2*Panel : (q+1)*kp*2*Panel]
			for j := range min(Panel, n-q*Panel) {
				row := w[(q*Panel+j)*k : (q*Panel+j+1)*k]
				for pp, v := range row {
					dst[(pp/2)*2*Panel+2*j+pp%2] = uint16(v)
				}
			}
		}
	})
	return p
}

// PackTBF16 packs the transpose of x [rows, cols] (bfloat16): it multiplies as a [cols, rows]
// weight, so MulBF16 computes a·x.
func PackTBF16[T ~uint16](rows, cols int, x []T) *PackedBF16 {
	return PackTBF16Into(nil, rows, cols, x)
}

// PackTBF16Into is PackTBF16 into dst's storage when it is large enough (dst may be nil), for
// callers that pack one block of a large matrix at a time. It writes every element of the
// panels (the padding past cols and an odd last row's partner as zeros), so a reused buffer
// needs no clearing, and fills each pair row from two rows of x at once, contiguously.
func PackTBF16Into[T ~uint16](dst *PackedBF16, rows, cols int, x []T) *PackedBF16 {
	kp := (rows + 1) / 2
	np := (cols + Panel - 1) / Panel
	var p *PackedBF16
	if dst != nil && cap(dst.panels) >= np*kp*2*Panel {
		p = &PackedBF16{N: cols, K: rows, panels: dst.panels[:np*kp*2*Panel]}
	} else {
		p = &PackedBF16{N: cols, K: rows, panels: make([]uint16, np*kp*2*Panel)}
	}
	xs := u16(x)
	var zeros [Panel]uint16
	parallel.For(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			panel := p.panels[q*kp*2*Panel : (q+1)*kp*2*Panel]
			w := min(Panel, cols-q*Panel)
			for pp := range kp {
				x0 := xs[2*pp*cols+q*Panel : 2*pp*cols+q*Panel+w]
				x1 := zeros[:w] // an odd last row's partner
				if 2*pp+1 < rows {
					x1 = xs[(2*pp+1)*cols+q*Panel : (2*pp+1)*cols+q*Panel+w]
				}
				x1 = x1[:len(x0)]
				if littleEndian { // a pair as one 32-bit store
					d := unsafe.Slice((*uint32)(unsafe.Pointer(&panel[pp*2*Panel])), len(x0))
					for j, v := range x0 {
						d[j] = uint32(v) | uint32(x1[j])<<16
					}
				} else {
					d := panel[pp*2*Panel : pp*2*Panel+2*len(x0)]
					for j, v := range x0 {
						d[2*j], d[2*j+1] = v, x1[j]
					}
				}
				clear(panel[pp*2*Panel+2*w : (pp+1)*2*Panel])
			}
		}
	})
	return p
}

// MulBF16 computes c = a·Wᵀ (c += a·Wᵀ when acc) for bfloat16 a [m, K] with row stride lda and
// float32 c [m, N] with row stride ldc, in parallel over groups of panels.
func MulBF16[T ~uint16](m int, a []T, lda int, p *PackedBF16, c []float32, ldc int, acc bool) {
	if m == 0 || p.N == 0 {
		return
	}
	k := activeBF16()
	au := u16(a)
	np := (p.N + Panel - 1) / Panel
	parallel.For(np, PanelGroup, func(q0, q1 int) {
		k.panels(m, au, lda, p, q0*Panel, min(q1*Panel, p.N), 0, p.K, c[q0*Panel:], ldc, acc)
	})
}

// MulRangeBF16 computes, on the calling goroutine, c (+)= a·W[n0:n1, k0:k1]ᵀ: a is bfloat16
// [m, k1−k0] with row stride lda, c is [m, n1−n0] with row stride ldc. n0 must be a multiple of
// Panel and k0 even.
func MulRangeBF16[T ~uint16](m int, a []T, lda int, p *PackedBF16, n0, n1, k0, k1 int, c []float32, ldc int, acc bool) {
	if m == 0 || n1 <= n0 {
		return
	}
	activeBF16().panels(m, u16(a), lda, p, n0, n1, k0, k1, c, ldc, acc)
}

// littleEndian: the low half of a uint32 is the first of its two uint16.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func u16[T ~uint16](a []T) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(a))), len(a))
}

func activeBF16() *kernelsBF16 {
	if k := bf16Impls.Active(); k != nil {
		return k
	}
	return &goKernelsBF16
}

// panels is MulRangeBF16 on the calling goroutine. For at most DecodeRows rows it takes the
// panels one at a time over all of K, so each goroutine streams one contiguous panel; otherwise it
// walks M in blocks of MBlock and K in blocks of KBlockBF16 so that a panel block stays in L1.
// Either way an element's K blocks are added in ascending order.
func (k *kernelsBF16) panels(m int, a []uint16, lda int, p *PackedBF16, n0, n1, k0, k1 int, c []float32, ldc int, acc bool) {
	if k0%2 != 0 {
		panic("gemm: MulRangeBF16 with an odd k0")
	}
	var scratch [MR * Panel]float32
	if k1 == k0 && !acc {
		for i := range m {
			clear(c[i*ldc : i*ldc+n1-n0])
		}
	}
	kp := p.pairs()
	block := func(i0, i1, kk, q int) {
		kb := min(KBlockBF16, k1-kk)
		add := acc || kk > k0
		panel := p.panels[(q*kp+kk/2)*2*Panel:]
		ncols := min(Panel, n1-q*Panel)
		for i := i0; i < i1; i += MR {
			k.rows(min(MR, i1-i), kb, a[i*lda+kk-k0:], lda, panel, c[i*ldc+q*Panel-n0:], ldc, ncols, add, scratch[:])
		}
	}
	if m <= DecodeRows {
		for q := n0 / Panel; q*Panel < n1; q++ {
			for kk := k0; kk < k1; kk += KBlockBF16 {
				block(0, m, kk, q)
			}
		}
		return
	}
	for i0 := 0; i0 < m; i0 += MBlock {
		i1 := min(i0+MBlock, m)
		for kk := k0; kk < k1; kk += KBlockBF16 {
			for q := n0 / Panel; q*Panel < n1; q++ {
				block(i0, i1, kk, q)
			}
		}
	}
}

// rows multiplies mr rows of A (kb columns from a) by the first ncols columns of a pair-panel
// block into c; a partial panel goes through scratch. An odd kb's last column is added after
// the pairs (A is never read past its kb columns).
func (k *kernelsBF16) rows(mr, kb int, a []uint16, lda int, panel []uint16, c []float32, ldc, ncols int, add bool, scratch []float32) {
	kp := kb / 2
	dst, ld := c, ldc
	if ncols < Panel {
		dst, ld = scratch, Panel
		if add {
			for i := range mr {
				copy(scratch[i*Panel:i*Panel+ncols], c[i*ldc:i*ldc+ncols])
			}
		}
	}
	k.tile[mr](kp, &a[0], lda, &panel[0], 2*Panel, &dst[0], ld, add)
	if kb%2 != 0 { // the last column of A times the even half of the last pair row
		last := panel[kp*2*Panel:]
		for i := range mr {
			ai := bf16f(a[i*lda+kb-1])
			row := dst[i*ld : i*ld+Panel]
			for j := range row {
				row[j] += ai * bf16f(last[2*j])
			}
		}
	}
	if ncols < Panel {
		for i := range mr {
			copy(c[i*ldc:i*ldc+ncols], scratch[i*Panel:i*Panel+ncols])
		}
	}
}

func bf16f(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// goKernelsBF16 is the pure-Go twin of the VDPBF16PS micro-kernels: the same tile, the same
// order of float32 additions.
var goKernelsBF16 = func() kernelsBF16 {
	var k kernelsBF16
	for mr := 1; mr <= MR; mr++ {
		k.tile[mr] = func(kp int, a *uint16, lda int, b *uint16, ldb int, c *float32, ldc int, acc bool) {
			tileBF16Go(mr, kp, a, lda, b, ldb, c, ldc, acc)
		}
	}
	return k
}()

func tileBF16Go(mr, kp int, a *uint16, lda int, b *uint16, ldb int, c *float32, ldc int, acc bool) {
	var as []uint16
	if kp > 0 {
		as = unsafe.Slice(a, (mr-1)*lda+2*kp)
	}
	bs := unsafe.Slice(b, max(0, (kp-1)*ldb+2*Panel))
	cs := unsafe.Slice(c, (mr-1)*ldc+Panel)
	var t [MR * Panel]float32
	for p := range kp {
		brow := bs[p*ldb : p*ldb+2*Panel]
		for i := range mr {
			a0, a1 := bf16f(as[i*lda+2*p]), bf16f(as[i*lda+2*p+1])
			ti := t[i*Panel : (i+1)*Panel]
			for j := range ti {
				ti[j] += a1 * bf16f(brow[2*j+1]) // exact product: one rounding per addition
				ti[j] += a0 * bf16f(brow[2*j])
			}
		}
	}
	for i := range mr {
		ci := cs[i*ldc : i*ldc+Panel]
		for j := range ci {
			if acc {
				ci[j] += t[i*Panel+j]
			} else {
				ci[j] = t[i*Panel+j]
			}
		}
	}
}
