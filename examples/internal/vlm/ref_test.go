package vlm

// The float64 reference of the model: the pure-Go kernels the package ran before it moved onto
// the SDK's ops (sequence-ordered rows, a probability matrix under the model's mask, a
// hand-written backward), in plain loops and gonum's Dgemm, with weights [out, in]. The
// finite-difference and gorgonia tests check it; Model's float32 results are held to it.

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// blockW holds one block's weights (or gradients) as flat row-major slices.
type blockW struct {
	ln1G, ln1B []float64 // [D]
	wqkv, bqkv []float64 // [3D, D], [3D]
	wo, bo     []float64 // [D, D], [D]
	ln2G, ln2B []float64 // [D]
	w1, b1     []float64 // [M, D], [M]
	w2, b2     []float64 // [D, M], [D]
}

// weights holds all trainable values (or gradients) in specs order.
type weights struct {
	patchW, patchB, patchPos []float64 // [D, P²C], [D], [NP, D]
	tokEmb, tokPos           []float64 // [V, D], [MaxLen, D]
	blocks                   []blockW
	lnfG, lnfB               []float64 // [D]
	headW, headB             []float64 // [V, D], [V]
}

func (w *weights) slots() []*[]float64 {
	s := []*[]float64{&w.patchW, &w.patchB, &w.patchPos, &w.tokEmb, &w.tokPos}
	for l := range w.blocks {
		b := &w.blocks[l]
		s = append(s, &b.ln1G, &b.ln1B, &b.wqkv, &b.bqkv, &b.wo, &b.bo, &b.ln2G, &b.ln2B, &b.w1, &b.b1, &b.w2, &b.b2)
	}
	return append(s, &w.lnfG, &w.lnfB, &w.headW, &w.headB)
}

func bind(c Config, vals [][]float64) weights {
	w := weights{blocks: make([]blockW, c.Layers)}
	for i, p := range w.slots() {
		*p = vals[i]
	}
	return w
}

type layerActs struct {
	x, xhat1, rstd1, h1 []float64
	qkv, p, ao          []float64 // [N, 3D], [B, H, S, S], [N, D]
	xhat2, rstd2, h2    []float64
	u, a                []float64
}

type acts struct {
	b, l, s      int
	tokens       []int32
	pv           []float64
	layers       []layerActs
	xhatF, rstdF []float64
	hF           []float64
}

func patchVectors64(c Config, img []uint8, b int) []float64 {
	v := patchVectors(c, img, b)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// gemm computes c = op(a)·op(b) + beta·c (row-major; op(a) [m,k], op(b) [k,n]).
func gemm(ta, tb bool, m, n, k int, a, b []float64, beta float64, c []float64) {
	if m == 0 || n == 0 {
		return
	}
	tA, lda := blas.NoTrans, k
	if ta {
		tA, lda = blas.Trans, m
	}
	tB, ldb := blas.NoTrans, n
	if tb {
		tB, ldb = blas.Trans, k
	}
	gonum.Implementation{}.Dgemm(tA, tB, m, n, k, 1, a, lda, b, ldb, beta, c, n)
}

// linear sets y [n, out] = x [n, in]·Wᵀ + bias.
func linear(n, out, in int, x, w, bias, y []float64) {
	gemm(false, true, n, out, in, x, w, 0, y)
	for i := range n {
		for j := range out {
			y[i*out+j] += bias[j]
		}
	}
}

// linearBack accumulates dW += dyᵀ·x and db += Σ dy, and sets dx = dy·W when dx is not nil.
func linearBack(n, out, in int, x, w, dy, dw, db, dx []float64) {
	gemm(true, false, out, in, n, dy, x, 1, dw)
	for i := range n {
		for j := range out {
			db[j] += dy[i*out+j]
		}
	}
	if dx != nil {
		gemm(false, false, n, in, out, dy, w, 0, dx)
	}
}

func keyLimit(i, np int) int { return max(np, i+1) }

const geluK = 1.702

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func layerNorm(n, d int, x, g, b, xhat, rstd, h []float64) {
	for i := range n {
		xr := x[i*d : (i+1)*d]
		mean := 0.0
		for _, v := range xr {
			mean += v
		}
		mean /= float64(d)
		vr := 0.0
		for _, v := range xr {
			vr += (v - mean) * (v - mean)
		}
		rs := 1 / math.Sqrt(vr/float64(d)+lnEps)
		for k, v := range xr {
			xhat[i*d+k] = (v - mean) * rs
			h[i*d+k] = xhat[i*d+k]*g[k] + b[k]
		}
		rstd[i] = rs
	}
}

func layerNormBack(n, d int, dh, xhat, rstd, g, dg, db, dx []float64) {
	for i := range n {
		dr, xr := dh[i*d:(i+1)*d], xhat[i*d:(i+1)*d]
		var m1, m2 float64
		for k := range dr {
			dg[k] += dr[k] * xr[k]
			db[k] += dr[k]
			m1 += dr[k] * g[k]
			m2 += dr[k] * g[k] * xr[k]
		}
		m1 /= float64(d)
		m2 /= float64(d)
		for k := range dr {
			dx[i*d+k] += rstd[i] * (dr[k]*g[k] - m1 - xr[k]*m2)
		}
	}
}

// attention fills p [B, H, S, S] (zero where masked) and ao [N, D] from qkv [N, 3D].
func attention(c Config, b, s int, qkv, p, ao []float64) {
	d, nh, np := c.Dim, c.Heads, c.Patches()
	dh := d / nh
	scale := 1 / math.Sqrt(float64(dh))
	for r := range b {
		for h := range nh {
			for i := range s {
				lim := min(keyLimit(i, np), s)
				pr := p[((r*nh+h)*s+i)*s:][:s]
				mx := math.Inf(-1)
				for j := range lim {
					dot := 0.0
					for e := range dh {
						dot += qkv[(r*s+i)*3*d+h*dh+e] * qkv[(r*s+j)*3*d+d+h*dh+e]
					}
					pr[j] = dot * scale
					mx = max(mx, pr[j])
				}
				sum := 0.0
				for j := range lim {
					pr[j] = math.Exp(pr[j] - mx)
					sum += pr[j]
				}
				o := ao[(r*s+i)*d+h*dh:][:dh]
				clear(o)
				for j := range lim {
					pr[j] /= sum
					for e := range dh {
						o[e] += pr[j] * qkv[(r*s+j)*3*d+2*d+h*dh+e]
					}
				}
			}
		}
	}
}

// attentionBack sets dqkv [N, 3D] from dao [N, D].
func attentionBack(c Config, b, s int, qkv, p, dao, dqkv []float64) {
	d, nh, np := c.Dim, c.Heads, c.Patches()
	dh := d / nh
	scale := 1 / math.Sqrt(float64(dh))
	clear(dqkv)
	dp := make([]float64, s)
	for r := range b {
		for h := range nh {
			for i := range s {
				lim := min(keyLimit(i, np), s)
				pr := p[((r*nh+h)*s+i)*s:][:s]
				do := dao[(r*s+i)*d+h*dh:][:dh]
				dot := 0.0
				for j := range lim {
					dp[j] = 0
					for e := range dh {
						dp[j] += do[e] * qkv[(r*s+j)*3*d+2*d+h*dh+e]
					}
					dot += pr[j] * dp[j]
				}
				for j := range lim {
					ds := pr[j] * (dp[j] - dot) * scale
					for e := range dh {
						dqkv[(r*s+i)*3*d+h*dh+e] += ds * qkv[(r*s+j)*3*d+d+h*dh+e]
						dqkv[(r*s+j)*3*d+d+h*dh+e] += ds * qkv[(r*s+i)*3*d+h*dh+e]
						dqkv[(r*s+j)*3*d+2*d+h*dh+e] += pr[j] * do[e]
					}
				}
			}
		}
	}
}

// forward runs the reference on b rows (patch vectors pv, tokens [b, l]) and returns the text
// positions' logits [b·l, V] and the record.
func forward(c Config, w *weights, pv []float64, tokens []int32, b, l int) ([]float64, *acts) {
	d, np, m, v, pl := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.patchLen()
	s := np + l
	n := b * s
	a := &acts{b: b, l: l, s: s, tokens: tokens, pv: pv, layers: make([]layerActs, c.Layers)}
	x := make([]float64, n*d)
	e := make([]float64, b*np*d)
	linear(b*np, d, pl, pv, w.patchW, w.patchB, e)
	for r := range b {
		for i := range np {
			for k := range d {
				x[(r*s+i)*d+k] = e[(r*np+i)*d+k] + w.patchPos[i*d+k]
			}
		}
		for t := range l {
			id := int(tokens[r*l+t])
			for k := range d {
				x[(r*s+np+t)*d+k] = w.tokEmb[id*d+k] + w.tokPos[t*d+k]
			}
		}
	}
	y := make([]float64, n*d)
	for li := range c.Layers {
		bw, la := &w.blocks[li], &a.layers[li]
		la.x = x
		la.xhat1, la.rstd1, la.h1 = make([]float64, n*d), make([]float64, n), make([]float64, n*d)
		layerNorm(n, d, x, bw.ln1G, bw.ln1B, la.xhat1, la.rstd1, la.h1)
		la.qkv = make([]float64, n*3*d)
		linear(n, 3*d, d, la.h1, bw.wqkv, bw.bqkv, la.qkv)
		la.p, la.ao = make([]float64, b*c.Heads*s*s), make([]float64, n*d)
		attention(c, b, s, la.qkv, la.p, la.ao)
		linear(n, d, d, la.ao, bw.wo, bw.bo, y)
		x1 := make([]float64, n*d)
		for i := range x1 {
			x1[i] = x[i] + y[i]
		}
		la.xhat2, la.rstd2, la.h2 = make([]float64, n*d), make([]float64, n), make([]float64, n*d)
		layerNorm(n, d, x1, bw.ln2G, bw.ln2B, la.xhat2, la.rstd2, la.h2)
		la.u, la.a = make([]float64, n*m), make([]float64, n*m)
		linear(n, m, d, la.h2, bw.w1, bw.b1, la.u)
		for i, u := range la.u {
			la.a[i] = u * sigmoid(geluK*u)
		}
		linear(n, d, m, la.a, bw.w2, bw.b2, y)
		x = make([]float64, n*d)
		for i := range x {
			x[i] = x1[i] + y[i]
		}
	}
	nt := b * l
	xt := make([]float64, nt*d)
	for r := range b {
		copy(xt[r*l*d:(r+1)*l*d], x[(r*s+np)*d:(r*s+s)*d])
	}
	a.xhatF, a.rstdF, a.hF = make([]float64, nt*d), make([]float64, nt), make([]float64, nt*d)
	layerNorm(nt, d, xt, w.lnfG, w.lnfB, a.xhatF, a.rstdF, a.hF)
	logits := make([]float64, nt*v)
	linear(nt, v, d, a.hF, w.headW, w.headB, logits)
	return logits, a
}

// backward accumulates into g the gradients of sum(dlogits ⊙ logits) for the pass a.
func backward(c Config, w, g *weights, a *acts, dlogits []float64) {
	d, np, m, v, pl := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.patchLen()
	b, l, s := a.b, a.l, a.s
	n, nt := b*s, b*l
	dh := make([]float64, nt*d)
	linearBack(nt, v, d, a.hF, w.headW, dlogits, g.headW, g.headB, dh)
	dxt := make([]float64, nt*d)
	layerNormBack(nt, d, dh, a.xhatF, a.rstdF, w.lnfG, g.lnfG, g.lnfB, dxt)
	dx := make([]float64, n*d)
	for r := range b {
		copy(dx[(r*s+np)*d:(r*s+s)*d], dxt[r*l*d:(r+1)*l*d])
	}
	du, dn := make([]float64, n*max(m, 3*d)), make([]float64, n*d)
	for li := c.Layers - 1; li >= 0; li-- {
		bw, gw, la := &w.blocks[li], &g.blocks[li], &a.layers[li]
		da := du[:n*m]
		linearBack(n, d, m, la.a, bw.w2, dx, gw.w2, gw.b2, da)
		for i, u := range la.u {
			sg := sigmoid(geluK * u)
			da[i] *= sg + geluK*u*sg*(1-sg)
		}
		linearBack(n, m, d, la.h2, bw.w1, da, gw.w1, gw.b1, dn)
		layerNormBack(n, d, dn, la.xhat2, la.rstd2, bw.ln2G, gw.ln2G, gw.ln2B, dx)
		linearBack(n, d, d, la.ao, bw.wo, dx, gw.wo, gw.bo, dn)
		dqkv := du[:n*3*d]
		attentionBack(c, b, s, la.qkv, la.p, dn, dqkv)
		linearBack(n, 3*d, d, la.h1, bw.wqkv, dqkv, gw.wqkv, gw.bqkv, dn)
		layerNormBack(n, d, dn, la.xhat1, la.rstd1, bw.ln1G, gw.ln1G, gw.ln1B, dx)
	}
	dimg := make([]float64, b*np*d)
	for r := range b {
		copy(dimg[r*np*d:(r+1)*np*d], dx[r*s*d:(r*s+np)*d])
		for i := range np {
			for k := range d {
				g.patchPos[i*d+k] += dx[(r*s+i)*d+k]
			}
		}
		for t := range l {
			id := int(a.tokens[r*l+t])
			for k := range d {
				g.tokEmb[id*d+k] += dx[(r*s+np+t)*d+k]
				g.tokPos[t*d+k] += dx[(r*s+np+t)*d+k]
			}
		}
	}
	linearBack(b*np, d, pl, a.pv, w.patchW, dimg, g.patchW, g.patchB, nil)
}

// attentionMassRef is ResponseAttention's sums for one block from its probabilities p.
func attentionMassRef(c Config, b, s, group, groups int, p []float64, plen, n []int, acc []float64) {
	np, nh := c.Patches(), c.Heads
	w := 2 + 2*groups
	for r := range b {
		a := acc[r*w:][:w]
		for j := range n[r] {
			q := np + plen[r] - 1 + j
			var im, tx float64
			for h := range nh {
				base := ((r*nh+h)*s + q) * s
				for k := range np {
					im += p[base+k]
				}
				for k := np; k <= q; k++ {
					tx += p[base+k]
				}
			}
			im, tx = im/float64(nh), tx/float64(nh)
			pt, pv := tx/float64(plen[r]+j), im/float64(np)
			a[0], a[1] = a[0]+pt, a[1]+pv
			a[2+2*group], a[3+2*group] = a[2+2*group]+pt, a[3+2*group]+pv
		}
	}
}
