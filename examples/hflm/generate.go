package hflm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
)

// Sampling says how Generate draws tokens.
type Sampling struct {
	MaxNewTokens int // > 0
	// Temperature 0 is greedy decoding (the most likely token, the lowest id on ties); otherwise
	// tokens are drawn from softmax(logits / Temperature) cut by TopK, then TopP, as
	// transformers' sampling orders its warpers.
	Temperature float64
	TopP        float64 // in (0, 1] when sampling; 1 keeps every token
	TopK        int     // <= 0 keeps every token
	// Stop ends a row after it emits one of these ids (generation_config's eos_token_id); the
	// stop token is part of the completion.
	Stop []int32
}

// kvCache is the keys and values of every layer, [B, S, Hkv, D] each, and how many positions
// of each row are filled.
type kvCache struct {
	k, v []*tensor.Tensor
	s    int
}

// Generate continues each prompt by up to s.MaxNewTokens tokens with a key/value cache: the
// prompts run once as one packed batch (prefill), then all rows advance one token per step
// (each row's query attends to its own cache). Row i samples with rngs[i] (not read when
// greedy). It returns each row's new tokens.
func (m *Model) Generate(prompts [][]int32, s Sampling, rngs []*rand.Rand) ([][]int32, error) {
	return m.GenerateInput(Input{Seqs: prompts}, nil, s, rngs)
}

// GenerateInput is Generate over an Input (Seqs are the prompts). With M-RoPE the new token
// after a prompt of length L of row i sits at position L + deltas[i] on every axis (the rope
// deltas of get_rope_index; nil: 0).
func (m *Model) GenerateInput(inp Input, deltas []int32, s Sampling, rngs []*rand.Rand) ([][]int32, error) {
	const op = "hflm.Model.Generate"
	prompts := inp.Seqs
	c := m.Config
	switch {
	case s.MaxNewTokens <= 0:
		return nil, tensor.Errorf(tensor.ErrParam, op, "MaxNewTokens", "is %d, want > 0", s.MaxNewTokens)
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 1):
		return nil, tensor.Errorf(tensor.ErrParam, op, "Temperature", "is %v, want a finite value >= 0", s.Temperature)
	case s.Temperature > 0 && !(s.TopP > 0 && s.TopP <= 1):
		return nil, tensor.Errorf(tensor.ErrParam, op, "TopP", "is %v, want a value in (0, 1]", s.TopP)
	case s.Temperature > 0 && len(rngs) != len(prompts):
		return nil, tensor.Errorf(tensor.ErrParam, op, "rngs", "has %d random sources for %d prompts", len(rngs), len(prompts))
	}
	for i, r := range rngs {
		if s.Temperature > 0 && r == nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, "rngs", "source %d is nil", i)
		}
	}
	if deltas != nil && (len(deltas) != len(prompts) || m.rope.Sections == nil) {
		return nil, tensor.Errorf(tensor.ErrParam, op, "deltas", "%d deltas for %d prompts (only with M-RoPE)", len(deltas), len(prompts))
	}
	in, err := m.packInput(inp)
	if err != nil {
		return nil, err
	}
	b := len(prompts)
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	if longest+s.MaxNewTokens > c.MaxPositionEmbeddings {
		return nil, tensor.Errorf(tensor.ErrParam, op, "MaxNewTokens", "%d new tokens after a prompt of %d pass max_position_embeddings %d", s.MaxNewTokens, longest, c.MaxPositionEmbeddings)
	}
	cache, err := m.newCache(b, longest+s.MaxNewTokens)
	if err != nil {
		return nil, err
	}
	defer cache.release()
	a, err := m.forwardCached(in, cache)
	if err != nil {
		return nil, err
	}
	lens := make([]int32, b)
	for i := range prompts {
		lens[i] = int32(len(prompts[i]))
	}
	hidden, err := m.lastHidden(a, in)
	if err != nil {
		return nil, err
	}
	out := make([][]int32, b)
	done := make([]bool, b)
	next := make([]int32, b)
	var e errs
	logits := m.alloc(&e, b, c.VocabSize)
	if e.err != nil {
		return nil, e.err
	}
	pool := newSamplers(min(b, runtime.GOMAXPROCS(0)))
	rows, toks := make([]int, 0, b), make([]int32, b)
	for step := 0; ; step++ {
		if e.do(tensor.Linear(logits, m.store(&e, hidden), m.head)); e.err != nil { // bfloat16 in bf16 mode
			return nil, e.err
		}
		// The sampler runs on the host: each step downloads the [B, V] logits on a device.
		lv, err := tensor.HostFloat32s(logits)
		if err != nil {
			return nil, err
		}
		rows = rows[:0]
		for i := range b {
			if !done[i] {
				rows = append(rows, i)
			}
		}
		pool.sampleRows(toks, lv, c.VocabSize, rows, s, rngs)
		active := 0
		for j, i := range rows {
			tok := toks[j]
			out[i] = append(out[i], tok)
			next[i] = tok
			done[i] = len(out[i]) == s.MaxNewTokens || slices.Contains(s.Stop, tok)
			if !done[i] {
				active++
			}
		}
		if active == 0 {
			return out, nil
		}
		// Finished rows run along (their tokens are not read) so the batch keeps its shape.
		if hidden, err = m.decodeStep(next, lens, deltas, cache); err != nil {
			return nil, err
		}
		for i := range lens {
			lens[i]++
		}
	}
}

// lastHidden gathers the final hidden state of each packed sequence [B, D]: what predicts its
// next token.
func (m *Model) lastHidden(a *acts, in *packed) (*tensor.Tensor, error) {
	last := make([]int32, len(in.starts)-1)
	for i := range last {
		last[i] = int32(in.starts[i+1] - 1)
	}
	ids, err := m.ints(last, len(last))
	if err != nil {
		return nil, err
	}
	return m.gatherRows(a.hidden, ids)
}

// newCache allocates the caches of b rows of up to s positions on the model's backend.
func (m *Model) newCache(b, s int) (*kvCache, error) {
	c := m.Config
	cache := &kvCache{s: s}
	var e errs
	for range m.layers {
		k := m.alloc(&e, b, s, c.NumKeyValueHeads, c.HeadDim)
		v := m.alloc(&e, b, s, c.NumKeyValueHeads, c.HeadDim)
		cache.k, cache.v = append(cache.k, k), append(cache.v, v)
	}
	if e.err != nil {
		cache.release()
		return nil, e.err
	}
	return cache, nil
}

// release frees a device cache's memory now (nothing on the host).
func (c *kvCache) release() {
	for _, t := range append(c.k, c.v...) {
		if !t.IsHost() {
			_ = t.Release()
		}
	}
}

// forwardCached is the inference forward of a packed batch that also writes every layer's
// keys and values into the cache, sequence b at positions [0, len_b) of row b.
func (m *Model) forwardCached(in *packed, cache *kvCache) (*acts, error) {
	at0, err := m.ints([]int32{0}, 1)
	if err != nil {
		return nil, err
	}
	return m.forward(in, false, func(l int, k, v *tensor.Tensor) error {
		for b := range len(in.starts) - 1 {
			for _, p := range []struct{ src, dst *tensor.Tensor }{{k, cache.k[l]}, {v, cache.v[l]}} {
				if err := writeRows(p.dst, b, p.src, in.starts[b], in.starts[b+1], at0); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// writeRows copies rows [lo, hi) of src [N, H, D] into positions [0, hi-lo) of row b of the
// cache [B, S, H, D] with tensor.KVCacheWrite on views of that row (at0: the int32 start 0 on
// the cache's backend).
func writeRows(cache *tensor.Tensor, b int, src *tensor.Tensor, lo, hi int, at0 *tensor.Tensor) error {
	h, d := cache.Dim(2), cache.Dim(3)
	row, err := cache.Rows(b, b+1)
	if err != nil {
		return err
	}
	kv, err := src.Rows(lo, hi)
	if err == nil {
		kv, err = kv.Reshape(1, hi-lo, h, d)
	}
	if err != nil {
		return err
	}
	return tensor.KVCacheWrite(row, kv, at0)
}

// decodeStep runs one new token per row at cache position lens[b] over the cache and returns
// the final hidden states [B, D]. Its rotary position is lens[b] (+ deltas[b] on every M-RoPE
// axis).
func (m *Model) decodeStep(tokens, lens, deltas []int32, cache *kvCache) (*tensor.Tensor, error) {
	c := m.Config
	b, d := len(tokens), c.HiddenSize
	hq, hkv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	var e errs
	ids, err := m.ints(tokens, b)
	e.do(err)
	slot, err := m.ints(slices.Clone(lens), b)
	e.do(err)
	pos := slot
	if k := len(m.rope.Sections); k > 0 {
		p := make([]int32, 0, k*b)
		for range k {
			for i, l := range lens {
				if deltas != nil {
					l += deltas[i]
				}
				p = append(p, l)
			}
		}
		pos, err = m.ints(p, k, b)
		e.do(err)
	}
	total := make([]int32, b)
	for i, l := range lens {
		total[i] = l + 1
	}
	lensT, err := m.ints(total, b)
	e.do(err)
	x := m.alloc(&e, b, d)
	h := m.alloc(&e, b, d)
	q := m.alloc(&e, b, hq, hd)
	k := m.alloc(&e, b, hkv, hd)
	v := m.alloc(&e, b, hkv, hd)
	attn := m.alloc(&e, b, 1, hq, hd)
	o := m.alloc(&e, b, d)
	gate := m.alloc(&e, b, c.IntermediateSize)
	up := m.alloc(&e, b, c.IntermediateSize)
	if e.err != nil {
		return nil, e.err
	}
	defer releaseAll(x, q, k, v, attn, o, gate, up) // h is returned
	e.do(m.embedInto(x, ids))
	for l := range m.layers {
		ly := &m.layers[l]
		e.do(tensor.RMSNorm(h, x, ly.inNorm, c.RMSNormEps))
		e.do(m.linearFwd(q, h, ly.q, nil))
		e.do(m.linearFwd(k, h, ly.k, nil))
		e.do(m.linearFwd(v, h, ly.v, nil))
		e.do(tensor.RoPE(q, q, pos, m.rope))
		e.do(tensor.RoPE(k, k, pos, m.rope))
		k4, v4, q4 := reshape4(k, b, hkv, hd), reshape4(v, b, hkv, hd), reshape4(q, b, hq, hd)
		e.do(tensor.KVCacheWrite(cache.k[l], k4, slot))
		e.do(tensor.KVCacheWrite(cache.v[l], v4, slot))
		e.do(tensor.AttentionDecode(attn, tensor.DecodeInputs{Q: q4, KCache: cache.k[l], VCache: cache.v[l], Lens: lensT}, m.attn))
		e.do(m.linearFwd(o, attn, ly.o, nil))
		e.do(add(x, o))
		e.do(tensor.RMSNorm(h, x, ly.postNorm, c.RMSNormEps))
		e.do(m.linearFwd(gate, h, ly.gate, nil))
		e.do(m.linearFwd(up, h, ly.up, nil))
		e.do(tensor.SwiGLU(gate, gate, up))
		e.do(m.linearFwd(o, gate, ly.down, nil))
		e.do(add(x, o))
		if e.err != nil {
			return nil, e.err
		}
	}
	e.do(tensor.RMSNorm(h, x, m.norm, c.RMSNormEps))
	return h, e.err
}

// releaseAll frees device tensors now (host ones are left to the collector).
func releaseAll(ts ...*tensor.Tensor) {
	for _, t := range ts {
		if !t.IsHost() {
			_ = t.Release()
		}
	}
}

// reshape4 views x [B, H, D] as [B, 1, H, D] (one new token per row).
func reshape4(x *tensor.Tensor, b, h, d int) *tensor.Tensor {
	return tensor.Must(x.Reshape(b, 1, h, d))
}
