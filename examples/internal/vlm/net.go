package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// The layer sequence on the SDK's ops.
//
// Rows. A batch of B rows of S = NP + L tokens has N = B·S token rows. The residual stream x,
// the queries and the attention output keep them image-first: the B·NP image tokens (row by
// row), then the B·L text tokens. Keys and values are computed from LayerNorm 1's output
// permuted to sequence order (each row's NP image tokens followed by its L text tokens). Then
// the model's mask is two calls of tensor.Attention with cu_seqlens, over the same keys:
//
//   - image queries, not causal: row b's NP queries see row b's NP image keys. The text keys
//     between two rows' image keys belong to sequences without queries (QN = 0), which
//     cu_seqlens allows and which cost nothing;
//   - text queries, causal: row b's L queries see row b's S keys, query t the first NP + t + 1
//     (tensor.AttentionConfig.Causal aligns queries to the last keys).
//
// The text rows are one view for the final LayerNorm and the head, and the image rows one view
// for the patch embedding, so only the keys' permutation (2·B row-range copies per block) is
// not an SDK op. The attention backward takes the two calls' dk and dv and adds them: each call
// writes every key (zero for keys its queries do not see).
//
// No probability matrix is kept. ResponseAttention's mass on the image keys is
// exp(lse_image − lse): a third call, text queries against the image keys only, gives lse_image;
// the forward's lse is the log-sum-exp over all the keys a query sees.

// geometry holds one batch shape's cu_seqlens and position ids on the backend.
type geometry struct {
	b, l, np, s            int
	imgQ, imgK, txtQ, txtK *tensor.Tensor // the two forward calls' cu_seqlens
	massQ                  *tensor.Tensor // text queries against imgK (ResponseAttention)
}

func newGeometry(e *exec, c Config, b, l int) *geometry {
	np := c.Patches()
	s := np + l
	g := &geometry{b: b, l: l, np: np, s: s}
	imgQ, imgK, massQ := make([]int32, 2*b+1), make([]int32, 2*b+1), make([]int32, 2*b+1)
	txtQ, txtK := make([]int32, b+1), make([]int32, b+1)
	for r := range b {
		imgQ[2*r+1], imgQ[2*r+2] = int32((r+1)*np), int32((r+1)*np)
		imgK[2*r+1], imgK[2*r+2] = int32(r*s+np), int32((r+1)*s)
		massQ[2*r+1], massQ[2*r+2] = int32((r+1)*l), int32((r+1)*l)
		txtQ[r+1], txtK[r+1] = int32((r+1)*l), int32((r+1)*s)
	}
	// host tensors on every backend: the attention reads them without a device-to-host copy
	host := func(v []int32) *tensor.Tensor { return tensor.Must(tensor.FromInt32(v, len(v))) }
	g.imgQ, g.imgK, g.massQ = host(imgQ), host(imgK), host(massQ)
	g.txtQ, g.txtK = host(txtQ), host(txtK)
	return g
}

// packs are the linear layers' tensor.PackedWeights, made once per pass (the weights change
// between passes, after an optimizer step).
type packs struct {
	patch, head *tensor.PackedWeight
	blocks      []bpacks
}

type bpacks struct {
	q, k, v, o, w1, w2 *tensor.PackedWeight
	bq, bk, bv         *tensor.Tensor // bqkv's views
}

func (e *exec) pack(c Config, w *tweights) packs {
	p := packs{patch: e.packed(w.patchW), head: e.packed(w.headW), blocks: make([]bpacks, c.Layers)}
	for l := range p.blocks {
		bw, bp := &w.blocks[l], &p.blocks[l]
		q, k, v, err := qkv(bw.wqkv, c.Dim)
		e.do(err)
		bp.q, bp.k, bp.v = e.packed(q), e.packed(k), e.packed(v)
		bp.bq, bp.bk, bp.bv, err = qkv(bw.bqkv, c.Dim)
		e.do(err)
		bp.o, bp.w1, bp.w2 = e.packed(bw.wo), e.packed(bw.w1), e.packed(bw.w2)
	}
	return p
}

// exec runs a sequence of ops and keeps the first error. An op after a failure still runs, on
// nil or stale tensors, which the SDK's checks reject without panicking; the caller returns the
// first error. keep allocates what a record keeps, tmp what the sequence needs only while it
// runs (tmp.Release frees it).
type exec struct {
	ops       Ops
	keep, tmp *tensor.Scratch
	err       error
}

func newExec(ops Ops, keep *tensor.Scratch) *exec {
	return &exec{ops: ops, keep: keep, tmp: tensor.NewScratch(ops.Backend())}
}

func (e *exec) do(err error) {
	if e.err == nil && err != nil {
		e.err = err
	}
}

func (e *exec) alloc(sc *tensor.Scratch, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, err := sc.New(dt, shape...)
	e.do(err)
	return t
}

// f32 is a kept float32 tensor, scratch a temporary one.
func (e *exec) f32(shape ...int) *tensor.Tensor { return e.alloc(e.keep, tensor.Float32, shape...) }
func (e *exec) scratch(shape ...int) *tensor.Tensor {
	return e.alloc(e.tmp, tensor.Float32, shape...)
}

// ids uploads int32 values to the backend (kept).
func (e *exec) ids(v []int32) *tensor.Tensor {
	h, err := tensor.FromInt32(v, len(v))
	if err != nil {
		e.do(err)
		return nil
	}
	t, err := e.keep.Put(h)
	e.do(err)
	return t
}

func (e *exec) rows(t *tensor.Tensor, lo, hi int) *tensor.Tensor {
	if t == nil {
		return nil
	}
	v, err := t.Rows(lo, hi)
	e.do(err)
	return v
}

func (e *exec) view(t *tensor.Tensor, shape ...int) *tensor.Tensor {
	if t == nil {
		return nil
	}
	v, err := t.Reshape(shape...)
	e.do(err)
	return v
}

func (e *exec) packed(w *tensor.Tensor) *tensor.PackedWeight {
	if w == nil {
		e.do(tensor.Errorf(tensor.ErrShape, "vlm.pack", "w", "is nil"))
		return nil
	}
	p, err := tensor.PackWeight(w)
	e.do(err)
	return p
}

func (e *exec) add(acc, x *tensor.Tensor) {
	if acc == nil || x == nil {
		e.do(tensor.Errorf(tensor.ErrShape, "vlm.add", "acc", "or x is nil"))
		return
	}
	e.do(e.ops.Add(acc, x, acc.Len()))
}

// copyRows copies src's rows [s0, s0+n) to dst's rows [d0, d0+n).
func (e *exec) copyRows(dst *tensor.Tensor, d0 int, src *tensor.Tensor, s0, n int) {
	e.do(tensor.CopyInto(e.rows(dst, d0, d0+n), e.rows(src, s0, s0+n)))
}

// toSeq writes src [N, ...] (image-first order) into dst in sequence order; toImageFirst is its
// inverse.
func (e *exec) toSeq(dst, src *tensor.Tensor, g *geometry) {
	ni := g.b * g.np
	for r := range g.b {
		e.copyRows(dst, r*g.s, src, r*g.np, g.np)
		e.copyRows(dst, r*g.s+g.np, src, ni+r*g.l, g.l)
	}
}

func (e *exec) toImageFirst(dst, src *tensor.Tensor, g *geometry) {
	ni := g.b * g.np
	for r := range g.b {
		e.copyRows(dst, r*g.np, src, r*g.s, g.np)
		e.copyRows(dst, ni+r*g.l, src, r*g.s+g.np, g.l)
	}
}

// attnCfg is the model's attention configuration, causal or not.
func attnCfg(c Config, causal bool) tensor.AttentionConfig {
	return tensor.DefaultAttentionConfig(c.Dim/c.Heads, causal)
}

// attnInputs are the image queries' (text false) or the text queries' inputs of a block.
func (e *exec) attnInputs(q, k, v *tensor.Tensor, g *geometry, text bool) tensor.AttentionInputs {
	ni, n := g.b*g.np, g.b*g.s
	if text {
		return tensor.AttentionInputs{Q: e.rows(q, ni, n), K: k, V: v, CuSeqlensQ: g.txtQ, CuSeqlensK: g.txtK}
	}
	return tensor.AttentionInputs{Q: e.rows(q, 0, ni), K: k, V: v, CuSeqlensQ: g.imgQ, CuSeqlensK: g.imgK}
}

// embed writes x [N, D] (image-first) from the patch vectors pv [B·NP, P²C] and the token ids
// tok [B·L]. The position tables are added row range by row range (B sums each): they are
// contiguous slices of their tables, so no position ids are needed (tensor.Embedding would
// read them back from a device to check them).
func (e *exec) embed(c Config, w *tweights, pk *packs, g *geometry, x, pv, tok *tensor.Tensor) {
	ni, n := g.b*g.np, g.b*g.s
	ximg, xtxt := e.rows(x, 0, ni), e.rows(x, ni, n)
	e.do(tensor.LinearBias(ximg, pv, pk.patch, w.patchB))
	e.embedTrusted(xtxt, w.tokEmb, tok)
	e.addPositions(ximg, w.patchPos, g.b, g.np)
	e.addPositions(xtxt, w.tokPos, g.b, g.l)
}

// embedTrusted is tensor.Embedding for ids the model has checked itself (on the host before they
// went up: Forward) or produced (the sampler's): on a backend with its own embedding kernel it
// calls that kernel directly, because the entry point reads the ids back to the host to check
// them again — a [B·L] download and a synchronisation per call that a step on the device does
// not otherwise pay. Shapes are checked here; elsewhere it is tensor.Embedding.
func (e *exec) embedTrusted(y, table, ids *tensor.Tensor) {
	k, ok := tensor.KernelOf[tensor.EmbeddingKernel](e.ops.Backend())
	if !ok || e.checkEmbed("vlm.embed", y, table, ids) != nil {
		e.do(tensor.Embedding(y, table, ids))
		return
	}
	e.do(k.Embedding(y, table, ids))
}

// embedTrustedBack is embedTrusted's tensor.EmbeddingBackward (accumulating).
func (e *exec) embedTrustedBack(dtable, ids, dy *tensor.Tensor) {
	in := tensor.EmbeddingGrad{IDs: ids, DY: dy, Accumulate: true}
	k, ok := tensor.KernelOf[tensor.EmbeddingKernel](e.ops.Backend())
	if !ok || e.checkEmbed("vlm.embedBack", dy, dtable, ids) != nil {
		e.do(tensor.EmbeddingBackward(dtable, in))
		return
	}
	e.do(k.EmbeddingBackward(dtable, in))
}

// checkEmbed checks what tensor.Embedding checks except the ids' range: rows [n, D] and table
// [V, D] float32, ids [n] int32, all on the op set's backend. A failure sends the call to the
// entry point, which reports it.
func (e *exec) checkEmbed(op string, rows, table, ids *tensor.Tensor) error {
	for _, c := range []struct {
		name string
		t    *tensor.Tensor
		dt   tensor.DType
	}{{"rows", rows, tensor.Float32}, {"table", table, tensor.Float32}, {"ids", ids, tensor.Int32}} {
		if c.t == nil {
			return tensor.Errorf(tensor.ErrShape, op, c.name, "is nil")
		}
		if err := tensor.CheckDType(op, c.name, c.t, c.dt); err != nil {
			return err
		}
		if c.t.Backend() != e.ops.Backend() {
			return tensor.Errorf(tensor.ErrBackend, op, c.name, "is on %s", c.t.Backend().Name())
		}
	}
	if err := tensor.CheckShape(op, "table", table, -1, -1); err != nil {
		return err
	}
	if err := tensor.CheckShape(op, "ids", ids, -1); err != nil {
		return err
	}
	return tensor.CheckShape(op, "rows", rows, ids.Dim(0), table.Dim(1))
}

// addPositions adds pos's first p rows to each of the b row ranges of x [b·p, D].
func (e *exec) addPositions(x, pos *tensor.Tensor, b, p int) {
	for r := range b {
		e.add(e.rows(x, r*p, (r+1)*p), e.rows(pos, 0, p))
	}
}

// positionsBack adds each of dx's b row ranges [b·p, D] to dpos's first p rows, in row order.
func (e *exec) positionsBack(dpos, dx *tensor.Tensor, b, p int) {
	for r := range b {
		e.add(e.rows(dpos, 0, p), e.rows(dx, r*p, (r+1)*p))
	}
}

// block runs decoder block li on x [N, D] and returns its output; la (may be a fresh tlayer
// whose tensors the pass keeps, or nil) receives the activations, kv (may be nil) sees the
// block's keys and values in sequence order [N, H, D/H].
func (e *exec) block(c Config, bw *tblock, bp *bpacks, g *geometry, x *tensor.Tensor, la *tlayer, kv func(k, v *tensor.Tensor)) *tensor.Tensor {
	n, d, h, m := g.b*g.s, c.Dim, c.Heads, c.MLPDim
	f := e.scratch
	if la != nil {
		f = e.f32
	} else {
		la = &tlayer{}
	}
	la.x0 = x
	la.h1, la.h1r = f(n, d), f(n, d)
	la.q, la.k, la.v, la.o, la.lse = f(n, h, d/h), f(n, h, d/h), f(n, h, d/h), f(n, h, d/h), f(n, h)
	e.do(tensor.LayerNorm(la.h1, x, bw.ln1G, bw.ln1B, lnEps))
	e.do(tensor.LinearBias(e.view(la.q, n, d), la.h1, bp.q, bp.bq))
	e.toSeq(la.h1r, la.h1, g)
	e.do(tensor.LinearBias(e.view(la.k, n, d), la.h1r, bp.k, bp.bk))
	e.do(tensor.LinearBias(e.view(la.v, n, d), la.h1r, bp.v, bp.bv))
	if kv != nil {
		kv(la.k, la.v)
	}
	ni := g.b * g.np
	e.do(tensor.AttentionLSE(e.rows(la.o, 0, ni), e.rows(la.lse, 0, ni), e.attnInputs(la.q, la.k, la.v, g, false), attnCfg(c, false)))
	e.do(tensor.AttentionLSE(e.rows(la.o, ni, n), e.rows(la.lse, ni, n), e.attnInputs(la.q, la.k, la.v, g, true), attnCfg(c, true)))
	y := e.scratch(n, d)
	e.do(tensor.LinearBias(y, e.view(la.o, n, d), bp.o, bw.bo))
	la.x1 = f(n, d)
	e.do(tensor.CopyInto(la.x1, x))
	e.add(la.x1, y)
	la.h2, la.u, la.a = f(n, d), f(n, m), f(n, m)
	e.do(tensor.LayerNorm(la.h2, la.x1, bw.ln2G, bw.ln2B, lnEps))
	e.do(tensor.LinearBias(la.u, la.h2, bp.w1, bw.b1))
	e.do(tensor.Activate(la.a, la.u, tensor.QuickGELU))
	e.do(tensor.LinearBias(y, la.a, bp.w2, bw.b2))
	out := f(n, d)
	e.do(tensor.CopyInto(out, la.x1))
	e.add(out, y)
	return out
}

func (om *OpsModel) forward(a *OpsActivations, pv []float32, tokens *tensor.Tensor) (*tensor.Tensor, error) {
	c, w := om.Config, &om.w
	b, l, s := a.b, a.l, a.s
	d, np, v := c.Dim, c.Patches(), c.Vocab
	n, ni, nt := b*s, b*np, b*l
	e := newExec(om.ops, a.sc)
	defer e.tmp.Release()
	a.geo = newGeometry(e, c, b, l)
	a.pk = e.pack(c, w)
	pvh, err := tensor.FromFloat32(pv, ni, c.patchLen())
	e.do(err)
	if e.err == nil {
		a.pv, err = a.sc.Put(pvh)
		e.do(err)
	}
	a.tok = e.alloc(e.keep, tensor.Int32, nt) // a copy: the caller may reuse tokens before Backward
	e.do(tensor.CopyInto(a.tok, e.view(tokens, nt)))
	x := e.f32(n, d)
	if e.err != nil {
		return nil, e.err
	}
	e.embed(c, w, &a.pk, a.geo, x, a.pv, a.tok)
	for li := range c.Layers {
		x = e.block(c, &w.blocks[li], &a.pk.blocks[li], a.geo, x, &a.layers[li], nil)
	}
	a.xF, a.hF = e.rows(x, ni, n), e.f32(nt, d)
	e.do(tensor.LayerNorm(a.hF, a.xF, w.lnfG, w.lnfB, lnEps))
	if e.err != nil {
		return nil, e.err
	}
	logits, err := tensor.New(om.ops.Backend(), tensor.Float32, b, l, v)
	if err != nil {
		return nil, err
	}
	e.do(tensor.LinearBias(e.view(logits, nt, v), a.hF, a.pk.head, w.headB))
	if e.err != nil {
		_ = logits.Release()
		return nil, e.err
	}
	return logits, nil
}

func (om *OpsModel) backward(a *OpsActivations, dlogits *tensor.Tensor) error {
	c, w, g, pk, geo := om.Config, &om.w, &om.g, &a.pk, a.geo
	b, l, s := a.b, a.l, a.s
	d, np, m, v, h := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.Heads
	n, ni, nt := b*s, b*np, b*l
	e := newExec(om.ops, tensor.NewScratch(om.ops.Backend()))
	defer e.keep.Release()
	defer e.tmp.Release()
	f := e.scratch
	dhF := f(nt, d)
	e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dhF, DWeight: g.headW, DBias: g.headB},
		tensor.LinearGrad{X: a.hF, Weight: pk.head, DY: e.view(dlogits, nt, v), Accumulate: true}))
	dx, dxn := f(n, d), f(n, d) // dx's image rows stay zero until the first block
	e.do(tensor.LayerNormBackward(e.rows(dx, ni, n), g.lnfG, g.lnfB,
		tensor.NormGrad{X: a.xF, Weight: w.lnfG, DY: dhF, Eps: lnEps, Accumulate: true}))
	om.report(e, g.headW, g.headB, g.lnfG, g.lnfB)
	da, dh, dhr, dhr2 := f(n, m), f(n, d), f(n, d), f(n, d)
	do, dq, dk, dv, dk2, dv2 := f(n, h, d/h), f(n, h, d/h), f(n, h, d/h), f(n, h, d/h), f(n, h, d/h), f(n, h, d/h)
	for li := c.Layers - 1; li >= 0; li-- {
		bw, gw, bp, la := &w.blocks[li], &g.blocks[li], &pk.blocks[li], &a.layers[li]
		// MLP: out = x1 + W2·gelu(W1·LN2(x1) + b1) + b2
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: da, DWeight: gw.w2, DBias: gw.b2},
			tensor.LinearGrad{X: la.a, Weight: bp.w2, DY: dx, Accumulate: true}))
		e.do(tensor.ActivateBackward(da, tensor.ActivationGrad{X: la.u, DY: da, Activation: tensor.QuickGELU}))
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dh, DWeight: gw.w1, DBias: gw.b1},
			tensor.LinearGrad{X: la.h2, Weight: bp.w1, DY: da, Accumulate: true}))
		e.do(tensor.LayerNormBackward(dxn, gw.ln2G, gw.ln2B, tensor.NormGrad{X: la.x1, Weight: bw.ln2G, DY: dh, Eps: lnEps, Accumulate: true}))
		e.add(dx, dxn)
		// attention: x1 = x0 + Wo·attn(LN1(x0)) + bo
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: e.view(do, n, d), DWeight: gw.wo, DBias: gw.bo},
			tensor.LinearGrad{X: e.view(la.o, n, d), Weight: bp.o, DY: dx, Accumulate: true}))
		e.do(tensor.AttentionBackward(e.rows(dq, 0, ni), dk2, dv2, tensor.AttentionGrad{AttentionInputs: e.attnInputs(la.q, la.k, la.v, geo, false),
			Out: e.rows(la.o, 0, ni), LSE: e.rows(la.lse, 0, ni), DOut: e.rows(do, 0, ni)}, attnCfg(c, false)))
		e.do(tensor.AttentionBackward(e.rows(dq, ni, n), dk, dv, tensor.AttentionGrad{AttentionInputs: e.attnInputs(la.q, la.k, la.v, geo, true),
			Out: e.rows(la.o, ni, n), LSE: e.rows(la.lse, ni, n), DOut: e.rows(do, ni, n)}, attnCfg(c, true)))
		e.add(dk, dk2)
		e.add(dv, dv2)
		gq, gk, gv, err := qkv(gw.wqkv, d)
		e.do(err)
		gbq, gbk, gbv, err := qkv(gw.bqkv, d)
		e.do(err)
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dh, DWeight: gq, DBias: gbq},
			tensor.LinearGrad{X: la.h1, Weight: bp.q, DY: e.view(dq, n, d), Accumulate: true}))
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dhr, DWeight: gk, DBias: gbk},
			tensor.LinearGrad{X: la.h1r, Weight: bp.k, DY: e.view(dk, n, d), Accumulate: true}))
		e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dhr2, DWeight: gv, DBias: gbv},
			tensor.LinearGrad{X: la.h1r, Weight: bp.v, DY: e.view(dv, n, d), Accumulate: true}))
		e.add(dhr, dhr2)
		e.toImageFirst(dxn, dhr, geo)
		e.add(dh, dxn)
		e.do(tensor.LayerNormBackward(dxn, gw.ln1G, gw.ln1B, tensor.NormGrad{X: la.x0, Weight: bw.ln1G, DY: dh, Eps: lnEps, Accumulate: true}))
		e.add(dx, dxn)
		om.report(e, gw.ln1G, gw.ln1B, gw.wqkv, gw.bqkv, gw.wo, gw.bo, gw.ln2G, gw.ln2B, gw.w1, gw.b1, gw.w2, gw.b2)
	}
	dimg, dtxt := e.rows(dx, 0, ni), e.rows(dx, ni, n)
	e.do(tensor.LinearBackward(tensor.LinearGradOut{DWeight: g.patchW, DBias: g.patchB},
		tensor.LinearGrad{X: a.pv, Weight: pk.patch, DY: dimg, Accumulate: true}))
	e.positionsBack(g.patchPos, dimg, b, np)
	e.embedTrustedBack(g.tokEmb, a.tok, dtxt)
	e.positionsBack(g.tokPos, dtxt, b, l)
	om.report(e, g.patchW, g.patchB, g.patchPos, g.tokEmb, g.tokPos)
	return e.err
}

// report hands gradients that are final to the hook, if one is set and the backward has not
// failed.
func (om *OpsModel) report(e *exec, grads ...*tensor.Tensor) {
	if om.final != nil && e.err == nil {
		om.final(grads...)
	}
}

// imageLSE returns, for block li of the pass, the log-sum-exp of each text query's scores
// over its row's image keys only [B·L, H] (on the backend; e's scratch).
func (e *exec) imageLSE(c Config, a *OpsActivations, li int) *tensor.Tensor {
	geo, la := a.geo, &a.layers[li]
	ni, n, nt := geo.b*geo.np, geo.b*geo.s, geo.b*geo.l
	lse := e.scratch(nt, c.Heads)
	out := e.scratch(nt, c.Heads, c.Dim/c.Heads)
	e.do(tensor.AttentionLSE(out, lse, tensor.AttentionInputs{Q: e.rows(la.q, ni, n), K: la.k, V: la.v,
		CuSeqlensQ: geo.massQ, CuSeqlensK: geo.imgK}, attnCfg(c, false)))
	return lse
}
