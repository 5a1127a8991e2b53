package vlm

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// kvCache holds each row's keys and values per layer, for stride = NP + MaxLen rounded up to a
// multiple of 8 positions: k[l] is [B, H, D/H, stride], each head's keys transposed so that a
// query's scores are one axpy over positions (as in attention); v[l] is [B, stride, D].
type kvCache[F Float] struct {
	stride int
	k, v   [][]F
}

// extend feeds new tokens through the model with the cache: row rows[i] gets the cnt[i]
// embeddings in x (packed, [Σcnt, D]) at sequence positions pos[i]… (positions count image
// tokens too). It returns the logits [len(rows), V] of each row's last new token.
func extend[F Float](c Config, w *weights[F], kv *kvCache[F], rows, pos, cnt []int, x []F) []F {
	d, np, m, v, nh := c.Dim, c.Patches(), c.MLPDim, c.Vocab, c.Heads
	dh := d / nh
	scale := F(1 / math.Sqrt(float64(dh)))
	simd := modelSIMD
	n := 0
	start := make([]int, len(rows))
	for i, k := range cnt {
		start[i] = n
		n += k
	}
	h := make([]F, n*d)
	qkv := make([]F, n*3*d)
	ao := make([]F, n*d)
	u := make([]F, n*m)
	for li := range c.Layers {
		bw := &w.blocks[li]
		layerNorm(n, d, x, bw.ln1G, bw.ln1B, nil, nil, h)
		gemmBias(n, 3*d, d, h, bw.wqkv, bw.bqkv, qkv)
		kc, vc := kv.k[li], kv.v[li]
		parallel.For(len(rows), parallel.Grain(n/len(rows)*d*16, 1<<15), func(lo, hi int) {
			sc := make([]F, kv.stride)
			for i := lo; i < hi; i++ {
				r := rows[i]
				kt := kc[r*kv.stride*d:] // row r's [H, dh, stride] keys
				cache := r * kv.stride * d
				for j := range cnt[i] {
					src := qkv[(start[i]+j)*3*d:]
					for e, kv1 := range src[d : 2*d] {
						kt[e*kv.stride+pos[i]+j] = kv1 // e = head·dh + its dimension
					}
					copy(vc[cache+(pos[i]+j)*d:][:d], src[2*d:3*d])
				}
				for j := range cnt[i] {
					p := pos[i] + j
					lim := keyLimit(p, np)
					wd := lim
					if simd {
						wd = ceil8(lim)
					}
					row := start[i] + j
					for hd := range nh {
						clear(sc[:wd])
						axpy(simd, dh, qkv[row*3*d+hd*dh:], kt[hd*dh*kv.stride:], kv.stride, sc, wd)
						softmax(simd, sc, lim, scale)
						o := ao[row*d+hd*dh:][:dh]
						clear(o)
						axpy(simd, lim, sc, vc[cache+hd*dh:], d, o, dh)
					}
				}
			}
		})
		gemm(false, false, n, d, d, ao, bw.wo, 1, x)
		addBias(n, d, x, bw.bo)
		layerNorm(n, d, x, bw.ln2G, bw.ln2B, nil, nil, h)
		gemmBias(n, m, d, h, bw.w1, bw.b1, u)
		gelu(u, u, simd)
		gemm(false, false, n, d, m, u, bw.w2, 1, x)
		addBias(n, d, x, bw.b2)
	}
	last := make([]F, len(rows)*d)
	for i := range rows {
		copy(last[i*d:(i+1)*d], x[(start[i]+cnt[i]-1)*d:][:d])
	}
	hl := make([]F, len(rows)*d)
	layerNorm(len(rows), d, last, w.lnfG, w.lnfB, nil, nil, hl)
	logits := make([]F, len(rows)*v)
	gemmBias(len(rows), v, d, hl, w.headW, w.headB, logits)
	return logits
}

// generate is Generate on host values. record, when non-nil, sees each row's logits before
// each sample (step k of row r predicts the k-th new token).
func generate[F Float](c Config, w *weights[F], pv []F, prompts [][]int32, maxNew int, temperature, topP float64, topK int, rng func(r int) *rand.Rand, record func(r int, logits []F)) [][]int32 {
	b := len(prompts)
	d, np := c.Dim, c.Patches()
	kv := &kvCache[F]{stride: ceil8(np + c.MaxLen), k: make([][]F, c.Layers), v: make([][]F, c.Layers)}
	for l := range c.Layers {
		kv.k[l] = make([]F, b*kv.stride*d)
		kv.v[l] = make([]F, b*kv.stride*d)
	}
	// prefill: image tokens then the prompt
	rows, pos, cnt := make([]int, b), make([]int, b), make([]int, b)
	tot := 0
	for r := range b {
		rows[r], cnt[r] = r, np+len(prompts[r])
		tot += cnt[r]
	}
	x := make([]F, tot*d)
	img := make([]F, b*np*d)
	embedPatches(c, w, pv, b, np, img)
	off := 0
	for r, p := range prompts {
		copy(x[off*d:], img[r*np*d:(r+1)*np*d])
		for t, id := range p {
			embedToken(c, w, id, t, x[(off+np+t)*d:])
		}
		off += cnt[r]
	}
	logits := extend(c, w, kv, rows, pos, cnt, x)
	out := make([][]int32, b)
	textLen := make([]int, b)
	for r := range b {
		textLen[r] = len(prompts[r])
	}
	probs := make([]float64, c.Vocab)
	order := make([]int, c.Vocab)
	for len(rows) > 0 {
		next := rows[:0:0]
		for i, r := range rows {
			lg := logits[i*c.Vocab : (i+1)*c.Vocab]
			if record != nil {
				record(r, lg)
			}
			tok := sample(lg, temperature, topP, topK, rng(r), probs, order)
			out[r] = append(out[r], tok)
			textLen[r]++
			if tok != EOS && len(out[r]) < maxNew && textLen[r] < c.MaxLen {
				next = append(next, r)
			}
		}
		rows = next
		if len(rows) == 0 {
			break
		}
		pos, cnt = pos[:len(rows)], cnt[:len(rows)]
		x = x[:len(rows)*d]
		for i, r := range rows {
			t := textLen[r] - 1 // text position of the token just sampled
			pos[i], cnt[i] = np+t, 1
			embedToken(c, w, out[r][len(out[r])-1], t, x[i*d:])
		}
		logits = extend(c, w, kv, rows, pos, cnt, x)
	}
	return out
}

// sample draws a token from logits: greedy when temperature is 0, otherwise from
// softmax(logits/temperature) restricted to the topK most likely tokens (when 0 < topK < vocab),
// then to the smallest set of those whose probability reaches topP of theirs (vLLM's order;
// ties broken by lower id).
func sample[F Float](logits []F, temperature, topP float64, topK int, rng *rand.Rand, probs []float64, order []int) int32 {
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
	px, err := m.checkImages(op, images, len(prompts))
	if err != nil {
		return nil, err
	}
	pv := patchVectors[float32](c, px, len(prompts))
	if rng == nil { // greedy: sample draws nothing
		rng = func(int) *rand.Rand { return nil }
	}
	if m.dev != nil { // on the op set's backend (UseOps): generate_ops.go
		return m.generateOnOps(pv, prompts, maxNew, temperature, topP, topK, rng, record)
	}
	return generate(c, &m.w, pv, prompts, maxNew, temperature, topP, topK, rng, record), nil
}
