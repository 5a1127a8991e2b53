package vlm

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
)

// sampler is an op set that samples on its backend (CUDAOps): the host sends each active row's
// uniform, drawn from its random source exactly as the host sampler draws, and gets back the
// token ids, so the logits never leave the device.
type sampler interface {
	SampleUniform(out, logits *tensor.Tensor, rows int, temperature, topP float64, topK int, uniforms *tensor.Tensor) error
}

// generate is Generate on the op set's backend. The prefill runs image and prompts through the
// blocks (net.go's layout), the rows padded to the longest prompt, and writes every position's
// keys and values into a cache [B·(NP+MaxLen), H, D/H] per block (tensor.KVCacheWrite): a
// padding position's slot is overwritten by the row's next token before any query can see it.
// Each decode step runs only the active rows: their new tokens' keys and values are copied into
// their cache slots, and one tensor.Attention call with cu_seqlens reads, per active row, the
// cache positions up to the new token (the rest of the cache belongs to sequences without
// queries, so nothing else is read or copied). Buffers are allocated once, for all B rows, and
// each step uses views of its first rows. record (may be nil) sees each row's logits before
// each sample, on the host.
func (om *OpsModel) generate(pv []float32, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng func(int) *rand.Rand, record func(int, []float32)) ([][]int32, error) {
	c, w := om.Config, &om.w
	b := len(prompts)
	d, np, v, h, mlp := c.Dim, c.Patches(), c.Vocab, c.Heads, c.MLPDim
	dh := d / h
	lmax := 0
	for _, p := range prompts {
		lmax = max(lmax, len(p))
	}
	s, smax := np+lmax, np+c.MaxLen
	e := newExec(om.ops, tensor.NewScratch(om.ops.Backend()))
	defer e.keep.Release()
	defer e.tmp.Release()
	pk := e.pack(c, w)
	kc, vc := make([]*tensor.Tensor, c.Layers), make([]*tensor.Tensor, c.Layers)
	for l := range c.Layers {
		kc[l], vc[l] = e.f32(b*smax, h, dh), e.f32(b*smax, h, dh)
	}

	// Prefill.
	g := newGeometry(e, c, b, lmax)
	ids := make([]int32, b*lmax)
	for r, p := range prompts {
		copy(ids[r*lmax:], p)
	}
	tok := e.ids(ids)
	pvt := e.f32(b*np, c.patchLen())
	if e.err == nil {
		e.do(tensor.CopyInto(pvt, tensor.Must(tensor.FromFloat32(pv, b*np, c.patchLen()))))
	}
	x := e.scratch(b*s, d)
	zero := e.ids(make([]int32, b))
	if e.err != nil {
		return nil, e.err
	}
	e.embed(c, w, &pk, g, x, pvt, tok)
	for li := range c.Layers {
		x = e.block(c, &w.blocks[li], &pk.blocks[li], g, x, nil, func(k, vv *tensor.Tensor) {
			e.do(tensor.KVCacheWrite(e.view(kc[li], b, smax, h, dh), e.view(k, b, s, h, dh), zero))
			e.do(tensor.KVCacheWrite(e.view(vc[li], b, smax, h, dh), e.view(vv, b, s, h, dh), zero))
		})
	}
	xd, hd, y := e.f32(b, d), e.f32(b, d), e.f32(b, d)
	q, kn, vn, o := e.f32(b, h, dh), e.f32(b, h, dh), e.f32(b, h, dh), e.f32(b, h, dh)
	u, logits := e.f32(b, mlp), e.f32(b, v)
	tokB := e.alloc(e.keep, tensor.Int32, b)
	for r, p := range prompts {
		e.copyRows(xd, r, x, b*np+r*lmax+len(p)-1, 1)
	}
	head := func(k int) {
		e.do(tensor.LayerNorm(e.rows(hd, 0, k), e.rows(xd, 0, k), w.lnfG, w.lnfB, lnEps))
		e.do(tensor.LinearBias(e.rows(logits, 0, k), e.rows(hd, 0, k), pk.head, w.headB))
	}
	head(b)
	if e.err != nil {
		return nil, e.err
	}
	e.tmp.Release() // the prefill's activations

	out := make([][]int32, b)
	textLen := make([]int, b)
	active := make([]int, b)
	for r := range b {
		textLen[r], active[r] = len(prompts[r]), r
	}
	upload := func(dst *tensor.Tensor, vals []int32) {
		e.do(tensor.CopyInto(e.rows(dst, 0, len(vals)), tensor.Must(tensor.FromInt32(vals, len(vals)))))
	}
	smp, onDevice := om.ops.(sampler)
	onDevice = onDevice && record == nil
	var bits []int32
	var picked, uni *tensor.Tensor
	if onDevice {
		bits = make([]int32, 2*b)
		picked, uni = e.alloc(e.keep, tensor.Int32, b), e.alloc(e.keep, tensor.Int32, 2*b)
	}
	host := make([]float32, b*v)
	probs := make([]float64, v)
	order := make([]int, v)
	got := make([]int32, b)
	cq, ck := make([]int32, 2*b+1), make([]int32, 2*b+1)
	// cu_seqlens stay host tensors over cq and ck on every backend: the attention validates and
	// reads them without a device-to-host copy per layer and step
	cuQ, cuK := tensor.Must(tensor.FromInt32(cq, 2*b+1)), tensor.Must(tensor.FromInt32(ck, 2*b+1))
	tkBuf, tpBuf, isActive := make([]int32, b), make([]int32, b), make([]bool, b)
	for len(active) > 0 {
		k := len(active)
		lg := e.rows(logits, 0, k)
		if onDevice {
			if temperature != 0 { // the host sampler's draws: one per active row, in row order
				for i, r := range active {
					f := math.Float64bits(rng(r).Float64())
					bits[2*i], bits[2*i+1] = int32(uint32(f)), int32(uint32(f>>32))
				}
				upload(uni, bits[:2*k])
			}
			e.do(smp.SampleUniform(picked, lg, k, temperature, topP, topK, uni))
			if e.err == nil {
				e.do(tensor.CopyInto(tensor.Must(tensor.FromInt32(got[:k], k)), e.rows(picked, 0, k)))
			}
		} else if e.err == nil {
			e.do(tensor.CopyInto(tensor.Must(tensor.FromFloat32(host[:k*v], k, v)), lg))
			for i, r := range active {
				row := host[i*v : (i+1)*v]
				if record != nil {
					record(r, row)
				}
				got[i] = sample(row, temperature, topP, topK, rng(r), probs, order)
			}
		}
		if e.err != nil {
			return nil, e.err
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
		tk, tp := tkBuf[:k], tpBuf[:k]
		clear(isActive)
		for i, r := range active {
			t := textLen[r] - 1 // text position of the token just sampled
			tk[i], tp[i] = out[r][len(out[r])-1], int32(t)
			isActive[r] = true
		}
		// cu_seqlens: per row, the active row's query with its keys 0..NP+t (or no query and
		// no key), then no query and the rest of the row's cache.
		for r := range b {
			q0, k0 := cq[2*r], int32(r*smax)
			cq[2*r+1], ck[2*r+1] = q0, k0
			if isActive[r] {
				cq[2*r+1], ck[2*r+1] = q0+1, k0+int32(np+textLen[r])
			}
			cq[2*r+2], ck[2*r+2] = cq[2*r+1], int32((r+1)*smax)
		}
		upload(tokB, tk)
		rows := func(t *tensor.Tensor) *tensor.Tensor { return e.rows(t, 0, k) }
		xk, hk, yk, uk := rows(xd), rows(hd), rows(y), rows(u)
		qk, kk, vk, ok := rows(q), rows(kn), rows(vn), rows(o)
		e.embedTrusted(xk, w.tokEmb, rows(tokB))
		for i, t := range tp {
			e.add(e.rows(xk, i, i+1), e.rows(w.tokPos, int(t), int(t)+1))
		}
		for li := range c.Layers {
			bw, bp := &w.blocks[li], &pk.blocks[li]
			e.do(tensor.LayerNorm(hk, xk, bw.ln1G, bw.ln1B, lnEps))
			e.do(tensor.LinearBias(e.view(qk, k, d), hk, bp.q, bp.bq))
			e.do(tensor.LinearBias(e.view(kk, k, d), hk, bp.k, bp.bk))
			e.do(tensor.LinearBias(e.view(vk, k, d), hk, bp.v, bp.bv))
			for i, r := range active {
				p := r*smax + np + int(tp[i])
				e.copyRows(kc[li], p, kk, i, 1)
				e.copyRows(vc[li], p, vk, i, 1)
			}
			e.do(tensor.Attention(ok, tensor.AttentionInputs{Q: qk, K: kc[li], V: vc[li], CuSeqlensQ: cuQ, CuSeqlensK: cuK}, attnCfg(c, true)))
			e.do(tensor.LinearBias(yk, e.view(ok, k, d), bp.o, bw.bo))
			e.add(xk, yk)
			e.do(tensor.LayerNorm(hk, xk, bw.ln2G, bw.ln2B, lnEps))
			e.do(tensor.LinearBias(uk, hk, bp.w1, bw.b1))
			e.do(tensor.Activate(uk, uk, tensor.QuickGELU))
			e.do(tensor.LinearBias(yk, uk, bp.w2, bw.b2))
			e.add(xk, yk)
		}
		head(k)
		if e.err != nil {
			return nil, e.err
		}
	}
	return out, nil
}

// sample draws a token from logits: greedy when temperature is 0, otherwise from
// softmax(logits/temperature) restricted to the topK most likely tokens (when 0 < topK < vocab),
// then to the smallest set of those whose probability reaches topP of theirs (vLLM's order;
// ties broken by lower id).
func sample(logits []float32, temperature, topP float64, topK int, rng *rand.Rand, probs []float64, order []int) int32 {
	if temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v)/temperature)
	}
	sum := 0.0
	for i, v := range logits {
		probs[i] = math.Exp(float64(v)/temperature - mx)
		sum += probs[i]
	}
	n := len(logits)
	if topP < 1 || (topK > 0 && topK < n) {
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case probs[a] > probs[b]:
				return -1
			case probs[a] < probs[b]:
				return 1
			}
			return 0
		})
		if topK > 0 && topK < n {
			n, sum = topK, 0
			for _, i := range order[:n] {
				sum += probs[i]
			}
		}
		kept, acc := 0, 0.0
		for kept < n {
			acc += probs[order[kept]]
			kept++
			if acc >= topP*sum {
				break
			}
		}
		u := rng.Float64() * acc
		for i := range kept {
			u -= probs[order[i]]
			if u < 0 {
				return int32(order[i])
			}
		}
		return int32(order[kept-1])
	}
	u := rng.Float64() * sum
	for i := range n {
		u -= probs[i]
		if u < 0 {
			return int32(i)
		}
	}
	return int32(n - 1)
}

// Generate samples a continuation for each row. images is [B, H, W, C] uint8; prompts[b] is
// row b's text prefix, used verbatim (include BOS, exactly as in the tokens given to Forward;
// 1 ≤ len ≤ MaxLen-1, ids in [0, Vocab)). Each row gets up to maxNew new tokens and stops after
// emitting EOS (which is included) or when prompt plus response reach MaxLen. temperature 0 is
// greedy decoding; otherwise tokens are drawn from softmax(logits/temperature) restricted to
// the nucleus of probability topP ∈ (0, 1]. The image and prompt are run once (prefill) and
// each new token reuses their cached keys and values. Draws from rng happen in row order at
// each step, so the result is deterministic given rng (and does not depend on GOMAXPROCS).
func (m *Model) Generate(images *tensor.Tensor, prompts [][]int32, maxNew int, temperature, topP float64, rng *rand.Rand) ([][]int32, error) {
	return m.generate(images, prompts, maxNew, temperature, topP, 0, shared(rng), nil)
}

// GenerateTopK is Generate with top-k sampling too: only the topK most likely tokens are drawn
// from (topK <= 0 or >= Vocab: no cut, exactly Generate), the nucleus topP taken among them.
func (m *Model) GenerateTopK(images *tensor.Tensor, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng *rand.Rand) ([][]int32, error) {
	return m.generate(images, prompts, maxNew, temperature, topP, topK, shared(rng), nil)
}

// GenerateRows is GenerateTopK with one random source per row: row r draws only from rngs[r],
// so its response does not depend on which other rows are sampled with it (a data-parallel
// trainer samples any shard of a batch and gets the rows one device would).
func (m *Model) GenerateRows(images *tensor.Tensor, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rngs []*rand.Rand) ([][]int32, error) {
	if len(rngs) != len(prompts) {
		return nil, tensor.Errorf(tensor.ErrShape, "vlm.Model.GenerateRows", "rngs", "has %d sources for %d prompts", len(rngs), len(prompts))
	}
	for r, g := range rngs {
		if g == nil && temperature != 0 {
			return nil, tensor.Errorf(tensor.ErrParam, "vlm.Model.GenerateRows", "rngs", "row %d is nil", r)
		}
	}
	return m.generate(images, prompts, maxNew, temperature, topP, topK, func(r int) *rand.Rand { return rngs[r] }, nil)
}

// shared is one random source for every row; nil stays nil (greedy decoding needs none).
func shared(rng *rand.Rand) func(int) *rand.Rand {
	if rng == nil {
		return nil
	}
	return func(int) *rand.Rand { return rng }
}

func (m *Model) generate(images *tensor.Tensor, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng func(int) *rand.Rand, record func(int, []float32)) ([][]int32, error) {
	const op = "vlm.Model.Generate"
	c := m.Config
	if len(prompts) == 0 {
		return nil, tensor.Errorf(tensor.ErrShape, op, "prompts", "is empty")
	}
	for r, p := range prompts {
		if len(p) < 1 || len(p) >= c.MaxLen {
			return nil, tensor.Errorf(tensor.ErrShape, op, "prompts", "row %d has length %d, want 1..%d", r, len(p), c.MaxLen-1)
		}
		for t, id := range p {
			if id < 0 || int(id) >= c.Vocab {
				return nil, tensor.Errorf(tensor.ErrParam, op, "prompts", "id %d at [%d, %d] is outside [0, %d)", id, r, t, c.Vocab)
			}
		}
	}
	if maxNew < 1 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "maxNew", "must be positive, got %d", maxNew)
	}
	if !(temperature >= 0) || math.IsInf(temperature, 1) {
		return nil, tensor.Errorf(tensor.ErrParam, op, "temperature", "must be finite and non-negative, got %v", temperature)
	}
	if !(topP > 0 && topP <= 1) {
		return nil, tensor.Errorf(tensor.ErrParam, op, "topP", "must be in (0, 1], got %v", topP)
	}
	if rng == nil && temperature != 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "rng", "is nil")
	}
	px, err := checkImages(op, c, images, len(prompts))
	if err != nil {
		return nil, err
	}
	pv := patchVectors(c, px, len(prompts))
	if rng == nil { // greedy: sample draws nothing
		rng = func(int) *rand.Rand { return nil }
	}
	if m.dev != nil { // on the op set's backend (UseOps)
		if err := m.deviceUse(); err != nil {
			return nil, err
		}
		return m.dev.om.generate(pv, prompts, maxNew, temperature, topP, topK, rng, record)
	}
	return m.host.generate(pv, prompts, maxNew, temperature, topP, topK, rng, record)
}
