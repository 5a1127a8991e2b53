package gemm

import "github.com/mtrl-go/mtrl/internal/parallel"

// The panels hold every element of W exactly (float32 copies), so a weight that is only
// multiplied (a frozen one) can drop its row-major values and be read back from its panels:
// element (n, k) of W is panels[(n/Panel)·K·Panel + k·Panel + n%Panel].

// Row copies row n of W [N, K] into dst[:K].
func (p *Packed) Row(n int, dst []float32) {
	q, j := n/Panel, n%Panel
	src := p.panels[q*p.K*Panel:]
	for k := range p.K {
		dst[k] = src[k*Panel+j]
	}
}

// Unpack copies W [N, K] into dst[:N·K], row-major.
func (p *Packed) Unpack(dst []float32) {
	parallel.For(p.N, Panel, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			p.Row(n, dst[n*p.K:(n+1)*p.K])
		}
	})
}

// Transpose returns the panels of Wᵀ [K, N] (what PackT of W's row-major values gives),
// transposing 64×64 blocks of the panels: the backward's dx = dy·W for a weight held only
// packed.
func Transpose(p *Packed) *Packed {
	n, k := p.N, p.K
	t := &Packed{N: k, K: n, panels: make([]float32, (k+Panel-1)/Panel*n*Panel)}
	parallel.For((k+Panel-1)/Panel, 1, func(lo, hi int) {
		for qt := lo; qt < hi; qt++ { // panel of Wᵀ: columns k0…k0+w of W, rows 0…n of Wᵀ's K
			k0 := qt * Panel
			w := min(Panel, k-k0)
			dst := t.panels[qt*n*Panel : (qt+1)*n*Panel]
			for q := 0; q*Panel < n; q++ { // panel of W: rows n0…n0+h
				n0 := q * Panel
				h := min(Panel, n-n0)
				src := p.panels[q*k*Panel:]
				for kk := range w {
					row := src[(k0+kk)*Panel : (k0+kk)*Panel+h] // W[n0:n0+h, k0+kk]
					for j, v := range row {
						dst[(n0+j)*Panel+kk] = v
					}
				}
			}
		}
	})
	return t
}

// Values returns the panels' storage (at least N·K elements, in panel order): memory a caller
// may view as a tensor of W's size without reading it as W.
func (p *Packed) Values() []float32 { return p.panels }
