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
// transposing blocks of the panels: the backward's dx = dy·W for a weight held only packed.
func Transpose(p *Packed) *Packed { return TransposeInto(nil, p, 0, p.N) }

// TransposeInto returns the panels of W[n0:n1, :]ᵀ [K, n1−n0] (what PackTInto of those rows
// gives), in dst's storage when it is large enough (a new Packed otherwise; dst may be nil):
// the LM head's backward packs one vocabulary chunk of a head held only packed at a time.
func TransposeInto(dst, p *Packed, n0, n1 int) *Packed {
	k, rows := p.K, n1-n0
	np := (k + Panel - 1) / Panel
	var t *Packed
	if dst != nil && cap(dst.panels) >= np*rows*Panel {
		t = &Packed{N: k, K: rows, panels: dst.panels[:np*rows*Panel]}
	} else {
		t = &Packed{N: k, K: rows, panels: make([]float32, np*rows*Panel)}
	}
	parallel.For(np, 1, func(lo, hi int) {
		for qt := lo; qt < hi; qt++ { // panel of Wᵀ: columns k0…k0+w of W
			k0 := qt * Panel
			w := min(Panel, k-k0)
			out := t.panels[qt*rows*Panel : (qt+1)*rows*Panel]
			if w < Panel { // a reused buffer's padding
				for r := range rows {
					clear(out[r*Panel+w : (r+1)*Panel])
				}
			}
			for n := n0; n < n1; { // rows n…n+h of W, within one of its panels
				q, j0 := n/Panel, n%Panel
				h := min(Panel-j0, n1-n)
				src := p.panels[q*k*Panel:]
				for kk := range w {
					col := src[(k0+kk)*Panel+j0 : (k0+kk)*Panel+j0+h] // W[n:n+h, k0+kk]
					for j, v := range col {
						out[(n-n0+j)*Panel+kk] = v
					}
				}
				n += h
			}
		}
	})
	return t
}

// Values returns the panels' storage (at least N·K elements, in panel order): memory a caller
// may view as a tensor of W's size without reading it as W.
func (p *Packed) Values() []float32 { return p.panels }
