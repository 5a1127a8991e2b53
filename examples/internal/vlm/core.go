package vlm

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

const lnEps = 1e-5

// layerActs is what one block keeps for the backward pass (rows are the N = B·S tokens).
type layerActs[F Float] struct {
	xhat1, rstd1, h1 []F // LayerNorm 1: normalised input [N,D], 1/σ [N], output [N,D]
	qkv              []F // [N, 3D]
	p                []F // attention probabilities [B, H, S, S] (zero where masked)
	ao               []F // attention output before the projection [N, D]
	xhat2, rstd2, h2 []F // LayerNorm 2
	u, a             []F // MLP pre-activation and GELU output [N, M]
}

// acts is the activation record of one forward pass.
type acts[F Float] struct {
	b, l, s      int     // batch rows, text length, sequence length NP+L
	tokens       []int32 // [B, L]
	pv           []F     // flattened patches [B·NP, P²C]
	layers       []layerActs[F]
	xhatF, rstdF []F // final LayerNorm of the text rows [B·L, D], [B·L]
	hF           []F // its output [B·L, D]
}

// patchVectors flattens images [B, H, W, C] into patch vectors [B·NP, P²C] (patches in raster
// order, each patch row-major with channels innermost), mapping 0..255 to -1..1.
func patchVectors[F Float](c Config, img []uint8, b int) []F {
	p, ch, hw := c.PatchSize, c.Channels, c.ImageSize
	g := hw / p
	np, pl := c.Patches(), c.patchLen()
	out := make([]F, b*np*pl)
	for r := range b {
		im := img[r*hw*hw*ch:]
		for py := range g {
			for px := range g {
				dst := out[((r*np)+py*g+px)*pl:]
				k := 0
				for dy := range p {
					src := im[((py*p+dy)*hw+px*p)*ch:]
					for j := range p * ch {
						dst[k] = F(src[j])*(2.0/255) - 1
						k++
					}
				}
			}
		}
	}
	return out
}

// embedPatches writes the image tokens of rows into x (row r's sequence starts at x[r·s·D]).
func embedPatches[F Float](c Config, w *weights[F], pv []F, b, s int, x []F) {
	e := make([]F, b*c.Patches()*c.Dim)
	gemm(false, false, b*c.Patches(), c.Dim, c.patchLen(), pv, w.patchW, 0, e)
	patchEmbed(c, b, s, x, e, w.patchB, w.patchPos)
}

// patchEmbed writes x's image rows: the projected patches e [B·NP, D] plus bias and position.
func patchEmbed[F Float](c Config, b, s int, x, e, pb, ppos []F) {
	d, np := c.Dim, c.Patches()
	for r := range b {
		for i := range np {
			dst := x[(r*s+i)*d : (r*s+i+1)*d]
			src := e[(r*np+i)*d:]
			pos := ppos[i*d:]
			for k := range dst {
				dst[k] = src[k] + pb[k] + pos[k]
			}
		}
	}
}

// tokenEmbed writes x's text rows from tokens [B, L].
func tokenEmbed[F Float](c Config, b, l, s int, x []F, tokens []int32, emb, pos []F) {
	np, d := c.Patches(), c.Dim
	for r := range b {
		for t := range l {
			e, p, dst := emb[int(tokens[r*l+t])*d:], pos[t*d:], x[(r*s+np+t)*d:]
			for k := range dst[:d] {
				dst[k] = e[k] + p[k]
			}
		}
	}
}

// patchEmbedBack gathers the image rows of dx into dimg [B·NP, D] and adds them to dpos.
func patchEmbedBack[F Float](c Config, b, s int, dimg, dpos, dx []F) {
	d, np := c.Dim, c.Patches()
	for r := range b {
		copy(dimg[r*np*d:(r+1)*np*d], dx[r*s*d:(r*s+np)*d])
	}
	for r := range b {
		for i := range np {
			src, dst := dimg[(r*np+i)*d:][:d], dpos[i*d:][:d]
			for k := range dst {
				dst[k] += src[k]
			}
		}
	}
}

// tokenEmbedBack adds the text rows of dx to the token and position tables' gradients.
func tokenEmbedBack[F Float](c Config, b, l, s int, demb, dpos, dx []F, tokens []int32) {
	d, np := c.Dim, c.Patches()
	for r := range b {
		for t := range l {
			src := dx[(r*s+np+t)*d:][:d]
			e, p := demb[int(tokens[r*l+t])*d:][:d], dpos[t*d:][:d]
			for k := range src {
				e[k] += src[k]
				p[k] += src[k]
			}
		}
	}
}

// textRows copies the text rows of x [B, S, D] into xt [B, L, D].
func textRows[F Float](c Config, b, l, s int, xt, x []F) {
	d, np := c.Dim, c.Patches()
	for r := range b {
		copy(xt[r*l*d:(r+1)*l*d], x[(r*s+np)*d:(r*s+s)*d])
	}
}

// textRowsBack writes dx [B, S, D]: dxt's rows at the text positions, zero at the image ones.
func textRowsBack[F Float](c Config, b, l, s int, dx, dxt []F) {
	d, np := c.Dim, c.Patches()
	for r := range b {
		clear(dx[r*s*d : (r*s+np)*d])
		copy(dx[(r*s+np)*d:(r*s+s)*d], dxt[r*l*d:(r+1)*l*d])
	}
}

// embedToken writes token id at text position t into dst [D].
func embedToken[F Float](c Config, w *weights[F], id int32, t int, dst []F) {
	d := c.Dim
	e, pos := w.tokEmb[int(id)*d:], w.tokPos[t*d:]
	for k := range dst[:d] {
		dst[k] = e[k] + pos[k]
	}
}

// rowGrain is the parallel chunk size for per-row loops over rows of length d.
func rowGrain(d int) int { return parallel.Grain(d, 1<<13) }

// layerNorm normalises the n rows of x into h = xhat·g + b; xhat and rstd are stored when
// non-nil.
func layerNorm[F Float](n, d int, x, g, b, xhat, rstd, h []F) {
	parallel.For(n, rowGrain(d), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr := x[i*d : (i+1)*d]
			var mean F
			for _, v := range xr {
				mean += v
			}
			mean /= F(d)
			var vr F
			for _, v := range xr {
				vr += (v - mean) * (v - mean)
			}
			rs := F(1 / math.Sqrt(float64(vr/F(d)+lnEps)))
			hr := h[i*d : (i+1)*d]
			for k, v := range xr {
				xh := (v - mean) * rs
				if xhat != nil {
					xhat[i*d+k] = xh
				}
				hr[k] = xh*g[k] + b[k]
			}
			if rstd != nil {
				rstd[i] = rs
			}
		}
	})
}

// layerNormBack adds the input gradient of a LayerNorm to dx and accumulates dg, db.
func layerNormBack[F Float](n, d int, dh, xhat, rstd, g, dg, db, dx []F) {
	for i := range n { // parameter gradients: sequential, fixed order
		dr, xr := dh[i*d:(i+1)*d], xhat[i*d:(i+1)*d]
		for k := range dr {
			dg[k] += dr[k] * xr[k]
			db[k] += dr[k]
		}
	}
	parallel.For(n, rowGrain(d), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dr, xr := dh[i*d:(i+1)*d], xhat[i*d:(i+1)*d]
			var m1, m2 F
			for k := range dr {
				gx := dr[k] * g[k]
				m1 += gx
				m2 += gx * xr[k]
			}
			m1 /= F(d)
			m2 /= F(d)
			rs := rstd[i]
			out := dx[i*d : (i+1)*d]
			for k := range dr {
				out[k] += rs * (dr[k]*g[k] - m1 - xr[k]*m2)
			}
		}
	})
}

// addBias adds b [d] to every row of y [n, d].
func addBias[F Float](n, d int, y, b []F) {
	for i := range n {
		r := y[i*d : (i+1)*d]
		for k := range r {
			r[k] += b[k]
		}
	}
}

// colSum accumulates the column sums of dy [n, d] into db.
func colSum[F Float](n, d int, dy, db []F) {
	for i := range n {
		r := dy[i*d : (i+1)*d]
		for k := range r {
			db[k] += r[k]
		}
	}
}

// GELU in its sigmoid form x·σ(1.702x).
const geluK = 1.702

func sigmoid[F Float](z F) F { return 1 / (1 + hostops.Exp(-z)) }

// gelu sets a = u·σ(1.702u) (a may be u); simd selects the AVX2 kernel (modelSIMD).
func gelu[F Float](u, a []F, simd bool) {
	parallel.For(len(u), 1<<14, func(lo, hi int) { geluSpan(simd, u[lo:hi], a[lo:hi]) })
}

// geluBack turns da into du in place: du = da·(σ + k·u·σ(1-σ)).
func geluBack[F Float](u, da []F, simd bool) {
	parallel.For(len(u), 1<<14, func(lo, hi int) { geluBackSpan(simd, u[lo:hi], da[lo:hi]) })
}

// keyLimit is the number of keys position i may attend to: image tokens (i < np) see all image
// tokens, text tokens see the image and the text up to themselves.
func keyLimit(i, np int) int { return max(np, i+1) }

// attention computes the output ao [N, D] of multi-head attention from qkv [N, 3D] for b rows
// of length s, storing probabilities in p [B, H, S, S] when p is non-nil. Per row and head the
// keys are first transposed, so that a query's scores, like its output, are one axpy: the dot
// products are then vector operations over keys (simd: AVX2). Without simd the arithmetic is the
// plain loops' (each dot product summed over the head's dimensions in order).
func attention[F Float](c Config, b, s int, qkv, p, ao []F, simd bool) {
	d, nh := c.Dim, c.Heads
	dh := d / nh
	np := c.Patches()
	scale := F(1 / math.Sqrt(float64(dh)))
	sk := ceil8(s)
	parallel.For(b, 1, func(lo, hi int) {
		kt := make([]F, dh*sk) // the head's keys transposed: kt[e·sk + j] = k_j[e]
		sc := make([]F, sk)
		for r := lo; r < hi; r++ {
			base := r * s
			for hd := range nh {
				qo, ko, vo := hd*dh, d+hd*dh, 2*d+hd*dh
				for j := range s {
					for e, v := range qkv[(base+j)*3*d+ko:][:dh] {
						kt[e*sk+j] = v
					}
				}
				for i := range s {
					lim := min(keyLimit(i, np), s)
					w := lim
					if simd {
						w = ceil8(lim)
					}
					clear(sc[:w])
					axpy(simd, dh, qkv[(base+i)*3*d+qo:], kt, sk, sc, w)
					softmax(simd, sc, lim, scale)
					o := ao[(base+i)*d+hd*dh:][:dh]
					clear(o)
					axpy(simd, lim, sc, qkv[base*3*d+vo:], 3*d, o, dh)
					if p != nil {
						copy(p[((r*nh+hd)*s+i)*s:][:lim], sc[:lim])
					}
				}
			}
		}
	})
}

// attentionBack computes dqkv [N, 3D] (overwritten) from dao [N, D]. Like attention it works on
// transposed operands so that every product is an axpy; each gradient element sums its terms in
// the order of the plain loops (dq over keys, dk and dv over queries).
func attentionBack[F Float](c Config, b, s int, qkv, p, dao, dqkv []F, simd bool) {
	d, nh := c.Dim, c.Heads
	dh := d / nh
	np := c.Patches()
	scale := F(1 / math.Sqrt(float64(dh)))
	sk := ceil8(s)
	clear(dqkv[:b*s*3*d])
	parallel.For(b, 1, func(lo, hi int) {
		vt := make([]F, dh*sk) // values transposed, as kt in attention
		dp := make([]F, sk)
		pt := make([]F, s*s) // pt[j·s + i] = p[i, j]
		dt := make([]F, s*s) // dt[j·s + i] = d score[i, j]
		for r := lo; r < hi; r++ {
			base := r * s
			for hd := range nh {
				qo, ko, vo := hd*dh, d+hd*dh, 2*d+hd*dh
				for j := range s {
					for e, v := range qkv[(base+j)*3*d+vo:][:dh] {
						vt[e*sk+j] = v
					}
				}
				for i := range s {
					lim := min(keyLimit(i, np), s)
					w := lim
					if simd {
						w = ceil8(lim)
					}
					pr := p[((r*nh+hd)*s+i)*s:][:lim]
					clear(dp[:w])
					axpy(simd, dh, dao[(base+i)*d+hd*dh:], vt, sk, dp, w) // dp[j] = do_i · v_j
					var dot F
					for j := range lim {
						dot += pr[j] * dp[j]
					}
					for j := range lim {
						ds := pr[j] * (dp[j] - dot) * scale
						dp[j] = ds
						pt[j*s+i], dt[j*s+i] = pr[j], ds
					}
					axpy(simd, lim, dp, qkv[base*3*d+ko:], 3*d, dqkv[(base+i)*3*d+qo:][:dh], dh)
				}
				// Key j is seen by every query when it is an image token, else by queries j….
				for j := range s {
					i0 := 0
					if j >= np {
						i0 = j
					}
					axpy(simd, s-i0, pt[j*s+i0:], dao[(base+i0)*d+hd*dh:], d, dqkv[(base+j)*3*d+vo:][:dh], dh)
					axpy(simd, s-i0, dt[j*s+i0:], qkv[(base+i0)*3*d+qo:], 3*d, dqkv[(base+j)*3*d+ko:][:dh], dh)
				}
			}
		}
	})
}

// forward runs the model on b rows: pv are the patch vectors, tokens [b, l]. It returns the
// logits [b·l, V] of the text positions and the activation record.
func forward[F Float](c Config, w *weights[F], pv []F, tokens []int32, b, l int) ([]F, *acts[F]) {
	d, np, m, v := c.Dim, c.Patches(), c.MLPDim, c.Vocab
	s := np + l
	n := b * s
	a := &acts[F]{b: b, l: l, s: s, tokens: tokens, pv: pv, layers: make([]layerActs[F], c.Layers)}
	x := make([]F, n*d)
	embedPatches(c, w, pv, b, s, x)
	tokenEmbed(c, b, l, s, x, tokens, w.tokEmb, w.tokPos)
	tmp := make([]F, n*d)
	for li := range c.Layers {
		bw := &w.blocks[li]
		la := &a.layers[li]
		la.xhat1, la.rstd1, la.h1 = make([]F, n*d), make([]F, n), make([]F, n*d)
		layerNorm(n, d, x, bw.ln1G, bw.ln1B, la.xhat1, la.rstd1, la.h1)
		la.qkv = make([]F, n*3*d)
		gemmBias(n, 3*d, d, la.h1, bw.wqkv, bw.bqkv, la.qkv)
		la.p = make([]F, b*c.Heads*s*s)
		la.ao = make([]F, n*d)
		attention(c, b, s, la.qkv, la.p, la.ao, modelSIMD)
		copy(tmp, x)
		gemm(false, false, n, d, d, la.ao, bw.wo, 1, tmp)
		addBias(n, d, tmp, bw.bo)
		x, tmp = tmp, x
		la.xhat2, la.rstd2, la.h2 = make([]F, n*d), make([]F, n), make([]F, n*d)
		layerNorm(n, d, x, bw.ln2G, bw.ln2B, la.xhat2, la.rstd2, la.h2)
		la.u, la.a = make([]F, n*m), make([]F, n*m)
		gemmBias(n, m, d, la.h2, bw.w1, bw.b1, la.u)
		gelu(la.u, la.a, modelSIMD)
		gemm(false, false, n, d, m, la.a, bw.w2, 1, x)
		addBias(n, d, x, bw.b2)
	}
	nt := b * l
	xt := tmp[:nt*d]
	textRows(c, b, l, s, xt, x)
	a.xhatF, a.rstdF, a.hF = make([]F, nt*d), make([]F, nt), make([]F, nt*d)
	layerNorm(nt, d, xt, w.lnfG, w.lnfB, a.xhatF, a.rstdF, a.hF)
	logits := make([]F, nt*v)
	gemmBias(nt, v, d, a.hF, w.headW, w.headB, logits)
	return logits, a
}

// backward accumulates into g the gradients of sum(dlogits ⊙ logits) for the pass recorded in a.
func backward[F Float](c Config, w, g *weights[F], a *acts[F], dlogits []F) {
	d, np, m, v := c.Dim, c.Patches(), c.MLPDim, c.Vocab
	b, l, s := a.b, a.l, a.s
	n, nt := b*s, b*l
	gemm(true, false, d, v, nt, a.hF, dlogits, 1, g.headW)
	colSum(nt, v, dlogits, g.headB)
	dh := make([]F, nt*d)
	gemm(false, true, nt, d, v, dlogits, w.headW, 0, dh)
	dxt := make([]F, nt*d)
	layerNormBack(nt, d, dh, a.xhatF, a.rstdF, w.lnfG, g.lnfG, g.lnfB, dxt)
	dx := make([]F, n*d)
	textRowsBack(c, b, l, s, dx, dxt)
	dbig := make([]F, n*max(m, 3*d))
	dsmall := make([]F, n*d)
	for li := c.Layers - 1; li >= 0; li-- {
		bw, gw, la := &w.blocks[li], &g.blocks[li], &a.layers[li]
		// MLP: x3 = x2 + gelu(h2·w1 + b1)·w2 + b2
		colSum(n, d, dx, gw.b2)
		gemm(true, false, m, d, n, la.a, dx, 1, gw.w2)
		du := dbig[:n*m]
		gemm(false, true, n, m, d, dx, bw.w2, 0, du)
		geluBack(la.u, du, modelSIMD)
		colSum(n, m, du, gw.b1)
		gemm(true, false, d, m, n, la.h2, du, 1, gw.w1)
		gemm(false, true, n, d, m, du, bw.w1, 0, dsmall)
		layerNormBack(n, d, dsmall, la.xhat2, la.rstd2, bw.ln2G, gw.ln2G, gw.ln2B, dx)
		// attention: x2 = x + attn(ln1(x))·wo + bo
		colSum(n, d, dx, gw.bo)
		gemm(true, false, d, d, n, la.ao, dx, 1, gw.wo)
		dao := dsmall
		gemm(false, true, n, d, d, dx, bw.wo, 0, dao)
		dqkv := dbig[:n*3*d]
		attentionBack(c, b, s, la.qkv, la.p, dao, dqkv, modelSIMD)
		colSum(n, 3*d, dqkv, gw.bqkv)
		gemm(true, false, d, 3*d, n, la.h1, dqkv, 1, gw.wqkv)
		dh1 := dsmall
		gemm(false, true, n, d, 3*d, dqkv, bw.wqkv, 0, dh1)
		layerNormBack(n, d, dh1, la.xhat1, la.rstd1, bw.ln1G, gw.ln1G, gw.ln1B, dx)
	}
	// embeddings
	pl := c.patchLen()
	dimg := dsmall[:b*np*d]
	patchEmbedBack(c, b, s, dimg, g.patchPos, dx)
	gemm(true, false, pl, d, b*np, a.pv, dimg, 1, g.patchW)
	colSum(b*np, d, dimg, g.patchB)
	tokenEmbedBack(c, b, l, s, g.tokEmb, g.tokPos, dx, a.tokens)
}

// attentionMass adds one block's response attention to acc [b, 2+2·groups] float64, for b rows
// with probabilities p [b, H, s, s] and span [b, 2] = (plen, n) per row (prompt tokens, BOS
// included, and response tokens): for each response query t = plen−1+j (j < n), the mass on
// the image keys and on the text keys 0..t, summed over heads in head-then-key order and
// divided by H, each divided by its number of keys (NP, t+1), is added to acc[r, 0] (text),
// acc[r, 1] (vision), acc[r, 2+2·group] and acc[r, 3+2·group], in query order. Summed over the
// blocks in order, these are Activations.Attention's values added as the MDI reward adds them.
func attentionMass(c Config, b, s, group, groups int, p []float32, span []int32, acc []float64) {
	np, nh := c.Patches(), c.Heads
	w := 2 + 2*groups
	for r := range b {
		plen, n := int(span[2*r]), int(span[2*r+1])
		a := acc[r*w:][:w]
		for j := range n {
			q := np + plen - 1 + j
			var im, tx float64
			for h := range nh {
				base := ((r*nh+h)*s + q) * s
				for k := range np {
					im += float64(p[base+k])
				}
				for k := np; k <= q; k++ {
					tx += float64(p[base+k])
				}
			}
			im, tx = im/float64(nh), tx/float64(nh)
			pt, pv := tx/float64(plen+j), im/float64(np)
			a[0], a[1] = a[0]+pt, a[1]+pv
			a[2+2*group], a[3+2*group] = a[2+2*group]+pt, a[3+2*group]+pv
		}
	}
}
