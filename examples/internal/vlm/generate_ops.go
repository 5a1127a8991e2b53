package vlm

import (
	"math"
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// decodeOps are the kernels of KV-cached generation on an op set's backend (CUDAOps has them;
// see kernels/decode.cu and kernels/sample.cu).
type decodeOps interface {
	KVStore(kc, vc *tensor.Tensor, n, stride int, meta, qkv *tensor.Tensor) error
	KVAttention(ao *tensor.Tensor, n, stride int, meta, qkv, kc, vc *tensor.Tensor) error
	EmbedAt(x *tensor.Tensor, n int, tokens, tpos, emb, pos *tensor.Tensor) error
	SampleUniform(out, logits *tensor.Tensor, rows int, temperature, topP float64, topK int, uniforms *tensor.Tensor) error
}

// generateOnOps is Generate after UseOps: on the op set when it has the decoding kernels and no
// logits are recorded, else on the host copy (brought up to date first).
func (m *Model) generateOnOps(pv []float32, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng func(int) *rand.Rand, record func(int, []float32)) ([][]int32, error) {
	if dec, ok := m.dev.om.ops.(decodeOps); ok && record == nil {
		return m.generateOps(dec, pv, prompts, maxNew, temperature, topP, topK, rng)
	}
	if err := m.hostRead(); err != nil {
		return nil, err
	}
	return generate(m.Config, &m.w, pv, prompts, maxNew, temperature, topP, topK, rng, record), nil
}

// generateOps is generate (generate.go) with the weights, the KV cache, the logits and the
// sampler on the op set's backend. The prefill runs the rows padded to the longest prompt (the
// padding's keys land in cache slots that a decode step overwrites before any query can reach
// them); each decode step embeds the rows' last tokens, extends the cache by one position and
// samples. Per step the host sends each active row's token, position and uniform (drawn from
// its random source in row order, exactly as the host sampler draws) and gets back the sampled
// token ids; logits and activations stay on the device.
func (m *Model) generateOps(dec decodeOps, pv []float32, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng func(int) *rand.Rand) (out [][]int32, err error) {
	if err := m.deviceUse(); err != nil {
		return nil, err
	}
	c, o, w := m.Config, m.dev.om.ops, &m.dev.om.w
	be := o.Backend()
	b := len(prompts)
	d, np, mlp, v := c.Dim, c.Patches(), c.MLPDim, c.Vocab
	lmax := 0
	for _, p := range prompts {
		lmax = max(lmax, len(p))
	}
	s, stride := np+lmax, np+c.MaxLen
	var owned []*tensor.Tensor
	defer func() {
		for _, t := range owned {
			_ = t.Release()
		}
	}()
	alloc := func(dt tensor.DType, n int) *tensor.Tensor {
		t, e := tensor.New(be, dt, n)
		if e != nil {
			if err == nil {
				err = e
			}
			return nil
		}
		owned = append(owned, t)
		return t
	}
	f32 := func(n int) *tensor.Tensor { return alloc(tensor.Float32, n) }
	upload := func(dst *tensor.Tensor, ids []int32) error {
		view, e := dst.Rows(0, len(ids))
		if e != nil {
			return e
		}
		return tensor.CopyInto(view, tensor.Must(tensor.FromInt32(ids, len(ids))))
	}
	rows := func(t *tensor.Tensor, lo, hi int) *tensor.Tensor { return tensor.Must(t.Rows(lo, hi)) }

	n := b * s // the prefill's tokens, the most any call extends by
	kc, vc := make([]*tensor.Tensor, c.Layers), make([]*tensor.Tensor, c.Layers)
	for l := range c.Layers {
		kc[l], vc[l] = f32(b*stride*d), f32(b*stride*d)
	}
	x, h, xhat, rstd := f32(n*d), f32(n*d), f32(n*d), f32(n)
	qkv, ao, u, a := f32(n*3*d), f32(n*d), f32(n*mlp), f32(n*mlp)
	hl, logits := f32(b*d), f32(b*v)
	last := f32(b * d)
	meta, tok, tpos := alloc(tensor.Int32, 2*n), alloc(tensor.Int32, n), alloc(tensor.Int32, b)
	picked, uni := alloc(tensor.Int32, b), alloc(tensor.Int32, 2*b)
	pvd := f32(len(pv))
	e := f32(b * np * d)
	if err != nil {
		return nil, err
	}

	// extend runs k new tokens (rows of x, their (row, position) in meta) through the blocks,
	// storing their keys and values in the cache.
	extend := func(k int) error {
		for li := range c.Layers {
			bw := &w.blocks[li]
			steps := []func() error{
				func() error { return o.LayerNorm(h, xhat, rstd, k, d, x, bw.ln1G, bw.ln1B) },
				func() error { return o.Gemm(qkv, false, false, k, 3*d, d, h, bw.wqkv, 0) },
				func() error { return o.AddBias(qkv, k, 3*d, bw.bqkv) },
				func() error { return dec.KVStore(kc[li], vc[li], k, stride, meta, qkv) },
				func() error { return dec.KVAttention(ao, k, stride, meta, qkv, kc[li], vc[li]) },
				func() error { return o.Gemm(x, false, false, k, d, d, ao, bw.wo, 1) },
				func() error { return o.AddBias(x, k, d, bw.bo) },
				func() error { return o.LayerNorm(h, xhat, rstd, k, d, x, bw.ln2G, bw.ln2B) },
				func() error { return o.Gemm(u, false, false, k, mlp, d, h, bw.w1, 0) },
				func() error { return o.AddBias(u, k, mlp, bw.b1) },
				func() error { return o.GELU(a, k*mlp, u) },
				func() error { return o.Gemm(x, false, false, k, d, mlp, a, bw.w2, 1) },
				func() error { return o.AddBias(x, k, d, bw.b2) },
			}
			if err := run(steps); err != nil {
				return err
			}
		}
		return nil
	}
	// head writes the logits of k rows of src [k, D].
	head := func(k int, src *tensor.Tensor) error {
		return run([]func() error{
			func() error { return o.LayerNorm(hl, xhat, rstd, k, d, src, w.lnfG, w.lnfB) },
			func() error { return o.Gemm(logits, false, false, k, v, d, hl, w.headW, 0) },
			func() error { return o.AddBias(logits, k, v, w.headB) },
		})
	}

	// Prefill: image tokens then each prompt, padded to the longest.
	ids := make([]int32, b*lmax)
	pm := make([]int32, 0, 2*n)
	for r, p := range prompts {
		copy(ids[r*lmax:], p)
		for q := range s {
			pm = append(pm, int32(r), int32(q))
		}
	}
	steps := []func() error{
		func() error { return tensor.CopyInto(pvd, tensor.Must(tensor.FromFloat32(pv, len(pv)))) },
		func() error { return o.Gemm(e, false, false, b*np, d, c.patchLen(), pvd, w.patchW, 0) },
		func() error { return o.PatchEmbed(x, b, s, e, w.patchB, w.patchPos) },
		func() error { return upload(tok, ids) },
		func() error { return o.TokenEmbed(x, b, lmax, s, tok, w.tokEmb, w.tokPos) },
		func() error { return upload(meta, pm) },
		func() error { return extend(n) },
	}
	if err := run(steps); err != nil {
		return nil, err
	}
	for r, p := range prompts {
		q := r*s + np + len(p) - 1
		if err := tensor.CopyInto(rows(last, r*d, (r+1)*d), rows(x, q*d, (q+1)*d)); err != nil {
			return nil, err
		}
	}
	if err := head(b, last); err != nil {
		return nil, err
	}

	out = make([][]int32, b)
	textLen := make([]int, b)
	active := make([]int, b)
	for r := range b {
		textLen[r], active[r] = len(prompts[r]), r
	}
	bits := make([]int32, 2*b)
	got := make([]int32, b)
	for len(active) > 0 {
		k := len(active)
		if temperature != 0 { // the host sampler's draws: one per active row, in row order
			for i, r := range active {
				f := math.Float64bits(rng(r).Float64())
				bits[2*i], bits[2*i+1] = int32(uint32(f)), int32(uint32(f>>32))
			}
			if err := upload(uni, bits[:2*k]); err != nil {
				return nil, err
			}
		}
		if err := dec.SampleUniform(picked, logits, k, temperature, topP, topK, uni); err != nil {
			return nil, err
		}
		if err := tensor.CopyInto(tensor.Must(tensor.FromInt32(got[:k], k)), rows(picked, 0, k)); err != nil {
			return nil, err
		}
		next := active[:0:0]
		for i, r := range active {
			out[r] = append(out[r], got[i])
			textLen[r]++
			if got[i] != EOS && len(out[r]) < maxNew && textLen[r] < c.MaxLen {
				next = append(next, r)
			}
		}
		active = next
		if len(active) == 0 {
			break
		}
		k = len(active)
		tk, tp, mt := make([]int32, k), make([]int32, k), make([]int32, 2*k)
		for i, r := range active {
			t := textLen[r] - 1 // text position of the token just sampled
			tk[i], tp[i] = out[r][len(out[r])-1], int32(t)
			mt[2*i], mt[2*i+1] = int32(r), int32(np+t)
		}
		steps := []func() error{
			func() error { return upload(tok, tk) },
			func() error { return upload(tpos, tp) },
			func() error { return upload(meta, mt) },
			func() error { return dec.EmbedAt(x, k, tok, tpos, w.tokEmb, w.tokPos) },
			func() error { return extend(k) },
			func() error { return head(k, x) },
		}
		if err := run(steps); err != nil {
			return nil, err
		}
	}
	return out, nil
}
