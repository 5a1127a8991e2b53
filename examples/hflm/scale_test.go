package hflm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

// scaleBatch is a micro-batch of prompts and completions of different lengths (ids within the
// test configs' vocabulary of 96) with a fixed loss gradient for each completion token.
type scaleBatch struct {
	prompts, comps [][]int32
	dlp, dent      [][]float32
}

func newScaleBatch(rows, maxPrompt, maxComp int, seed uint64) scaleBatch {
	r := rand.New(rand.NewPCG(seed, 7))
	var b scaleBatch
	for range rows {
		p := make([]int32, 1+r.IntN(maxPrompt))
		c := make([]int32, 1+r.IntN(maxComp))
		dl, de := make([]float32, len(c)), make([]float32, len(c))
		for i := range p {
			p[i] = int32(r.IntN(96))
		}
		for i := range c {
			c[i] = int32(r.IntN(96))
			dl[i], de[i] = float32(r.NormFloat64()), float32(0.1*r.NormFloat64())
		}
		b.prompts, b.comps = append(b.prompts, p), append(b.comps, c)
		b.dlp, b.dent = append(b.dlp, dl), append(b.dent, de)
	}
	return b
}

// rows returns rows [lo, hi) of the batch.
func (b scaleBatch) rows(lo, hi int) scaleBatch {
	return scaleBatch{b.prompts[lo:hi], b.comps[lo:hi], b.dlp[lo:hi], b.dent[lo:hi]}
}

// tokens is the prompt and completion tokens of each row.
func (b scaleBatch) tokens(i int) int { return len(b.prompts[i]) + len(b.comps[i]) }

// run scores the batch (padded to padT response columns when padT > 0) with train, runs the
// backward of the fixed gradients (entropy's when withEnt) and returns the scores.
func (b scaleBatch) run(t *testing.T, m *Model, padT int, withEnt bool) *Scores {
	s, err := m.score(b.prompts, b.comps, 1, true, padT)
	require.NoError(t, err)
	dent := b.dent
	if !withEnt {
		dent = nil
	}
	require.NoError(t, s.Backward(b.dlp, dent))
	return s
}

// gradCopies returns a copy of every parameter's gradient, by name.
func gradCopies(t *testing.T, m *Model) map[string][]float32 {
	ps, err := m.Params()
	require.NoError(t, err)
	out := map[string][]float32{}
	for _, p := range ps {
		v, err := tensor.HostFloat32s(p.Grad)
		require.NoError(t, err)
		out[p.Name] = append([]float32(nil), v...)
	}
	return out
}

// onHost returns a tensor's values as float32 on the host (a download from a device, bfloat16
// widened).
func onHost(t *tensor.Tensor) []float32 {
	if !t.IsHost() {
		t = tensor.Must(tensor.To(tensor.CPU(), t))
	}
	return host(widen(t))
}

// TestCheckpointingGradients: with activation checkpointing the parameter gradients are the
// same bits as with the activations kept, in float32 and in bf16 mode, tied and untied, and
// with LoRA dropout (the recomputation replays the masks; the random state after the backward
// is the one without checkpointing).
func TestCheckpointingGradients(t *testing.T) {
	b := newScaleBatch(5, 7, 9, 1)
	for _, cfg := range []string{"qwen2-untied.json", "qwen2-tied.json"} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for _, lora := range []bool{false, true} {
				name := strings.TrimSuffix(cfg, ".json") + "/" + dt.String()
				if lora {
					name += "/lora"
				}
				t.Run(name, func(t *testing.T) {
					var grads []map[string][]float32
					var next []float64
					for _, ckpt := range []bool{false, true} {
						m := loadCheckpoint(t, filepath.Join("testdata", cfg), 21, "float32", 1)
						require.NoError(t, m.SetMixedPrecision(dt))
						if lora {
							require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.25, TargetModules: []string{"all-linear"}, Seed: 5}))
							// B is zero at initialisation, which would leave A's gradient zero.
							for _, ad := range m.adapters {
								for i := range host(ad.b) {
									host(ad.b)[i] = 0.05 * float32(i%7-3)
								}
								require.NoError(t, ad.pack())
							}
						}
						m.SetCheckpointing(ckpt)
						s := b.run(t, m, 0, true)
						if ckpt {
							require.Nil(t, s.a.layers[0].h1, "checkpointing keeps the layers' inputs only")
						}
						grads = append(grads, gradCopies(t, m))
						if lora {
							next = append(next, m.dropRNG.Float64())
						}
					}
					require.Equal(t, grads[0], grads[1])
					if lora {
						require.Equal(t, next[0], next[1])
					}
				})
			}
		}
	}
}

// gammaN is γ_n = n·u/(1 − n·u), u = 2⁻²⁴: a float32 sum of n terms in any order is within
// γ_{n−1}·Σ|terms| of the exact sum (Higham, Accuracy and Stability of Numerical Algorithms,
// §4.2), so two orders are within 2γ·Σ|terms| of each other.
func gammaN(n int) float64 {
	u := math.Ldexp(1, -24)
	return float64(n) * u / (1 - float64(n)*u)
}

// magnitudes accumulates, through traceGrad, Σ|terms| of every weight gradient the backward
// sums: |dy|ᵀ|x| for a projection's weight, Σ|dy| for its bias, Σ|dy ⊙ x̂| for a norm.
type magnitudes map[string][]float64

func (mg magnitudes) trace(m *Model) func(name string, x, dy *tensor.Tensor) {
	return func(name string, x, dy *tensor.Tensor) {
		if x.DType() == tensor.Int32 { // the embeddings: a scatter of dy's rows
			ids, _ := tensor.Must(tensor.To(tensor.CPU(), x)).Int32s()
			d, dyv := dy.Dim(-1), onHost(dy)
			a := mg.get(name, m.Config.VocabSize*d)
			for i, id := range ids {
				for j, g := range dyv[i*d : (i+1)*d] {
					a[int(id)*d+j] += math.Abs(float64(g))
				}
			}
			return
		}
		xv, dyv := onHost(x), onHost(dy)
		k, n := x.Dim(-1), dy.Dim(-1)
		rows := len(xv) / k
		if strings.HasSuffix(name, "norm.weight") {
			a := mg.get(name, k)
			for i := range rows {
				ms := 0.0
				for _, v := range xv[i*k : (i+1)*k] {
					ms += float64(v) * float64(v)
				}
				r := 1 / math.Sqrt(ms/float64(k)+m.Config.RMSNormEps)
				for j := range k {
					a[j] += math.Abs(float64(dyv[i*k+j]) * float64(xv[i*k+j]) * r)
				}
			}
			return
		}
		w, bias := mg.get(name+".weight", n*k), mg.get(name+".bias", n)
		for i := range rows {
			for o := range n {
				g := math.Abs(float64(dyv[i*n+o]))
				bias[o] += g
				if g == 0 {
					continue
				}
				for j, v := range xv[i*k : (i+1)*k] {
					w[o*k+j] += g * math.Abs(float64(v))
				}
			}
		}
	}
}

func (mg magnitudes) get(name string, n int) []float64 {
	if mg[name] == nil {
		mg[name] = make([]float64, n)
	}
	return mg[name]
}

// addHead adds the LM head's |terms| bound for scores s with loss gradients dlp and dent
// (ragged as s.LogProbs; nil: zero) at temperature 1: d log p_y / d z_v = [v = y] − p_v and
// d H / d z_v = −p_v(log p_v + H), so |dz_v| ≤ 2|dlp| + |dent|·(1/e + log V) and the weight
// gradient's terms are bounded by that times |h|. Positions past a row's gradients (the
// padding) have none.
func (mg magnitudes) addHead(m *Model, s *Scores, dlp, dent [][]float32) {
	name := "lm_head.weight"
	if m.Config.TieWordEmbeddings {
		name = "model.embed_tokens.weight"
	}
	h := onHost(s.lmIn.Hidden)
	d, v := s.lmIn.Hidden.Dim(1), m.Config.VocabSize
	a := mg.get(name, v*d)
	entMax := 1/math.E + math.Log(float64(v))
	k := 0
	for i := range s.LogProbs {
		for t := range s.scored(i) {
			c := 0.0
			if t < len(s.LogProbs[i]) {
				c = 2 * math.Abs(float64(dlp[i][t]))
				if dent != nil {
					c += math.Abs(float64(dent[i][t])) * entMax
				}
			}
			for j, x := range h[k*d : (k+1)*d] {
				for r := range v {
					a[r*d+j] += c * math.Abs(float64(x))
				}
			}
			k++
		}
	}
}

// requireWithin checks |got − want| ≤ 2γ_n·bound elementwise, with names missing from the
// bounds required bit-identical.
func requireWithin(t *testing.T, want, got map[string][]float32, bounds magnitudes, n int) {
	g2 := 2 * gammaN(n)
	for name, w := range want {
		b := bounds[name]
		if b == nil {
			require.Equal(t, w, got[name], name)
			continue
		}
		for i, v := range w {
			lim := g2 * b[i]
			require.LessOrEqual(t, math.Abs(float64(got[name][i])-float64(v)), lim, "%s[%d]: %v vs %v", name, i, got[name][i], v)
		}
	}
}

// TestPaddedEqualsPacked: right-padding every sequence to the longest prompt plus T (the LM
// head scoring all T response positions, the padding's with zero gradient) gives the same
// log-probs and entropies bit for bit, and the same gradients except the projections' and the
// LM head's weights, whose float32 sums over tokens regroup (internal/gemm's blocks of 128
// rows, the head's row chunks): those are within 2γ_n·Σ|terms| (n bounds the terms and block
// sums of a chain). With few enough rows there is one block and they too are the same bits.
func TestPaddedEqualsPacked(t *testing.T) {
	paddedEqualsPacked(t, func(cfg string) *Model { return loadCheckpoint(t, filepath.Join("testdata", cfg), 21, "float32", 1) }, true, nil)
}

// paddedEqualsPacked is TestPaddedEqualsPacked on the models load returns; hostBlocks: the
// host's GEMM blocks decide which gradients regroup (else every weight gradient the bound
// covers is checked against it, whatever the device's summation order). A non-nil near
// replaces every check by near(got, want) on each result: for a device whose GEMMs may sum in
// another order for another row count, so that no value of the two runs is sure to be the same.
func paddedEqualsPacked(t *testing.T, load func(cfg string) *Model, hostBlocks bool, near func(t *testing.T, name string, got, want []float32)) {
	for _, c := range []struct {
		name           string
		rows, maxP, t  int
		blockIdentical bool
		cfg            string
		dt             tensor.DType
	}{
		{"one-block", 4, 6, 20, true, "qwen2-untied.json", tensor.Float32},
		{"blocks", 9, 12, 40, false, "qwen2-untied.json", tensor.Float32},
		{"blocks-tied-bf16", 9, 12, 40, false, "qwen2-tied.json", tensor.BFloat16},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newScaleBatch(c.rows, c.maxP, c.t/3, 3) // short answers in T columns
			longest := 0
			for _, p := range b.prompts {
				longest = max(longest, len(p))
			}
			width := longest + c.t
			var grads []map[string][]float32
			var lps [][][]float32
			bounds := magnitudes{}
			for _, w := range []int{0, c.t} {
				m := load(c.cfg)
				require.NoError(t, m.SetMixedPrecision(c.dt))
				if w > 0 {
					traceGrad = bounds.trace(m)
				}
				s := b.run(t, m, w, true)
				traceGrad = nil
				if w > 0 {
					bounds.addHead(m, s, b.dlp, b.dent)
				}
				lps = append(lps, s.LogProbs, s.Entropy)
				grads = append(grads, gradCopies(t, m))
			}
			if near != nil {
				for i, name := range []string{"log-probs", "entropies"} {
					for r := range lps[i] {
						near(t, fmt.Sprintf("%s[%d]", name, r), lps[i+2][r], lps[i][r])
					}
				}
				for name, g := range grads[0] {
					near(t, name, grads[1][name], g)
				}
				return
			}
			require.Equal(t, lps[0], lps[2], "log-probs")
			require.Equal(t, lps[1], lps[3], "entropies")
			rows := c.rows * width
			if c.blockIdentical && hostBlocks {
				require.LessOrEqual(t, rows, 128)
				require.Equal(t, grads[0], grads[1])
				return
			}
			if hostBlocks {
				require.Greater(t, rows, 128)
			}
			// Only the projections' and the LM head's weights regroup (the head scores the
			// padding's positions too); biases, norms and embedding rows sum row by row.
			for name := range bounds {
				head := name == "lm_head.weight" || (name == "model.embed_tokens.weight" && strings.Contains(c.cfg, "tied"))
				if !strings.HasSuffix(name, "proj.weight") && !head {
					delete(bounds, name)
				}
			}
			requireWithin(t, grads[0], grads[1], bounds, 2*rows+16)
			diff := 0
			for name, g := range grads[0] {
				for i := range g {
					if g[i] != grads[1][name][i] {
						diff++
					}
				}
			}
			t.Logf("%d padded rows (%d real): %d gradient values differ in the last bits", rows, sumTokens(b), diff)
		})
	}
}

func sumTokens(b scaleBatch) int {
	n := 0
	for i := range b.prompts {
		n += b.tokens(i)
	}
	return n
}

// TestTokenBudgetMicroBatches: accumulating the gradient over micro-batches built by a token
// budget (loop.Config.MicroBatchTokens' rule) gives the fixed split's total gradient within
// 2γ_n·Σ|terms| per value (every sum over tokens regroups; the embeddings' rows are added in
// row order either way: the same bits). The loss gradient is per token of the mini-batch, so
// it does not depend on the split.
func TestTokenBudgetMicroBatches(t *testing.T) {
	b := newScaleBatch(12, 10, 14, 4)
	budget := 40
	var splits [][][2]int
	var fixed [][2]int
	for lo := 0; lo < len(b.prompts); lo += 4 {
		fixed = append(fixed, [2]int{lo, lo + 4})
	}
	var byTokens [][2]int
	start, n := 0, 0
	for i := range b.prompts {
		if i > start && n+b.tokens(i) > budget {
			byTokens, start, n = append(byTokens, [2]int{start, i}), i, 0
		}
		n += b.tokens(i)
	}
	byTokens = append(byTokens, [2]int{start, len(b.prompts)})
	splits = append(splits, fixed, byTokens)
	require.NotEqual(t, len(fixed), len(byTokens))
	var grads []map[string][]float32
	bounds := magnitudes{}
	for k, split := range splits {
		m := loadCheckpoint(t, filepath.Join("testdata", "qwen2-untied.json"), 21, "float32", 1)
		if k == 0 {
			traceGrad = bounds.trace(m)
		}
		for _, r := range split {
			mb := b.rows(r[0], r[1])
			s := mb.run(t, m, 0, false)
			if k == 0 {
				bounds.addHead(m, s, mb.dlp, nil)
			}
		}
		traceGrad = nil
		grads = append(grads, gradCopies(t, m))
	}
	requireWithin(t, grads[0], grads[1], bounds, 2*sumTokens(b)+16)
}

// bf16Roundings is how many tensors bf16 mode rounds on a token's path through a model of
// layers decoder layers: the embedding and the final norm, and per layer the input norm, q, k
// and v before and after RoPE (q and k), the attention, the output projection, the residual,
// the second norm, gate, up, SwiGLU, the down projection and the residual.
func bf16Roundings(layers int) int { return 2 + 15*layers }

// TestMixedPrecisionBF16 checks what bf16 mode computes with and keeps: the weights are the
// masters rounded to bfloat16 (after an optimizer step too, the masters keeping the float32
// update below bfloat16's resolution), the kept activations are bfloat16, the gradients
// float32; and its log-probs and gradients against float32's within the error of R = 2 + 15L
// independent bfloat16 roundings (relative error at most u = 2⁻⁸ each) accumulating as √R:
// |Δ log p| ≤ √R·u·max|log p| per token, and ‖Δg‖ ≤ 2√R·u·‖g‖ per parameter (the gradient
// reads each rounded activation twice, in the forward and in the backward).
func TestMixedPrecisionBF16(t *testing.T) {
	u := math.Ldexp(1, -8)
	b := newScaleBatch(6, 8, 10, 9)
	for _, cfg := range []string{"qwen2-untied.json", "qwen2-tied.json", "llama-linear.json"} {
		t.Run(strings.TrimSuffix(cfg, ".json"), func(t *testing.T) {
			var lps [][][]float32
			var grads []map[string][]float32
			var bf *Model
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				m := loadCheckpoint(t, filepath.Join("testdata", cfg), 21, "float32", 1)
				require.NoError(t, m.SetMixedPrecision(dt))
				require.Equal(t, dt, m.MixedPrecision())
				s := b.run(t, m, 0, true)
				require.Equal(t, dt, s.a.layers[0].h1.DType(), "kept activations")
				require.Equal(t, dt, s.a.layers[0].act.DType(), "kept activations")
				lps = append(lps, s.LogProbs)
				grads = append(grads, gradCopies(t, m))
				bf = m
			}
			sqrtR := math.Sqrt(float64(bf16Roundings(bf.Config.NumHiddenLayers)))
			worst, top := 0.0, 0.0
			for i := range lps[0] {
				for j := range lps[0][i] {
					worst = math.Max(worst, math.Abs(float64(lps[0][i][j]-lps[1][i][j])))
					top = math.Max(top, math.Abs(float64(lps[0][i][j])))
				}
			}
			require.Greater(t, worst, 0.0, "bf16 mode rounds")
			require.LessOrEqual(t, worst, sqrtR*u*top)
			t.Logf("max |Δ log p| = %.3g = %.2f·u·max|log p| (bound √R = %.2f)", worst, worst/(u*top), sqrtR)
			for name, g := range grads[0] {
				var dn, gn float64
				for i, v := range g {
					d := float64(grads[1][name][i]) - float64(v)
					dn, gn = dn+d*d, gn+float64(v)*float64(v)
				}
				require.LessOrEqual(t, math.Sqrt(dn), 2*sqrtR*u*math.Sqrt(gn), name)
			}

			// The weights computed with are the masters rounded; a step below bfloat16's
			// resolution moves the float32 masters, and the copies follow their rounding.
			requireRounded := func() {
				for name, w := range bf.mp.Mats {
					got, _ := w.Weight().BF16s()
					for i, v := range host(bf.byName[name].value) {
						require.Equal(t, tensor.BF16FromFloat32(v), got[i], name)
					}
				}
				for name, w := range bf.mp.Vecs {
					for i, v := range host(bf.byName[name].value) {
						require.Equal(t, tensor.BF16FromFloat32(v).Float32(), host(w)[i], name)
					}
				}
			}
			requireRounded()
			opt, _, err := bf.Training(0)
			require.NoError(t, err)
			before := append([]float32(nil), host(bf.params[1].value)...)
			_, err = opt.Step(1e-5, 0)
			require.NoError(t, err)
			moved := 0
			for i, v := range host(bf.params[1].value) {
				if v != before[i] {
					moved++
				}
			}
			require.Greater(t, moved, len(before)/2, "the float32 masters take the update")
			requireRounded()
		})
	}
}

// TestMixedPrecisionCurve trains the same model from the same seed in float32 and in bf16 mode
// (GRPO through tprl/loop, as TestPolicyLearns): both learn, and the logged curves are the
// comparison in docs/2026-11-memory.md.
func TestMixedPrecisionCurve(t *testing.T) {
	cfgFile := filepath.Join("testdata", "qwen2-untied.json")
	var curves [][]map[string]float64
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		m := loadCheckpoint(t, cfgFile, 21, "float32", 1)
		ref := loadCheckpoint(t, cfgFile, 21, "float32", 1)
		require.NoError(t, m.SetMixedPrecision(dt))
		require.NoError(t, ref.SetMixedPrecision(dt))
		curves = append(curves, trainSeven(t, m, &Policy[testPrompt]{Model: ref, Prompt: func(p testPrompt) []int32 { return p }}, 12, 3e-2))
	}
	for i := range curves[0] {
		f, h := curves[0][i], curves[1][i]
		t.Logf("step %2d  reward fp32 %.3f bf16 %.3f  kl_loss fp32 %.5f bf16 %.5f  grad_norm fp32 %.4f bf16 %.4f",
			i+1, f["reward/seven"], h["reward/seven"], f["actor/kl_loss"], h["actor/kl_loss"], f["actor/grad_norm"], h["actor/grad_norm"])
	}
}

// TestBF16Backward checks SetBF16Backward: in bf16 mode the log-probs are the same bits (the
// forward does not change), the gradients change (the rounding happens) and stay within the
// error of TestMixedPrecisionBF16's R roundings plus R' = 1 + 7L more, those of the gradient
// flowing into each linear layer and the LM head: ‖Δg‖ ≤ 2√(R+R')·u·‖g‖ against float32 mode
// per parameter; and the option does nothing in float32 mode.
func TestBF16Backward(t *testing.T) {
	u := math.Ldexp(1, -8)
	b := newScaleBatch(6, 8, 10, 9)
	for _, cfg := range []string{"qwen2-untied.json", "llama-linear.json"} {
		t.Run(strings.TrimSuffix(cfg, ".json"), func(t *testing.T) {
			var lps [][][]float32
			var grads []map[string][]float32
			var layers int
			for _, mode := range []struct {
				dt   tensor.DType
				grad bool
			}{{tensor.Float32, false}, {tensor.Float32, true}, {tensor.BFloat16, false}, {tensor.BFloat16, true}} {
				m := loadCheckpoint(t, filepath.Join("testdata", cfg), 21, "float32", 1)
				require.NoError(t, m.SetMixedPrecision(mode.dt))
				m.SetBF16Backward(mode.grad)
				s := b.run(t, m, 0, true)
				lps = append(lps, s.LogProbs)
				grads = append(grads, gradCopies(t, m))
				layers = m.Config.NumHiddenLayers
			}
			require.Equal(t, lps[0], lps[1], "float32 mode: log-probs")
			require.Equal(t, grads[0], grads[1], "float32 mode: SetBF16Backward changes nothing")
			require.Equal(t, lps[2], lps[3], "bf16 mode: the forward is unchanged")
			sqrtR := math.Sqrt(float64(bf16Roundings(layers) + 1 + 7*layers))
			changed, worst := 0, 0.0
			for name, g := range grads[0] {
				var dn, gn float64
				for i, v := range g {
					d := float64(grads[3][name][i]) - float64(v)
					dn, gn = dn+d*d, gn+float64(v)*float64(v)
					if grads[3][name][i] != grads[2][name][i] {
						changed++
					}
				}
				require.LessOrEqual(t, math.Sqrt(dn), 2*sqrtR*u*math.Sqrt(gn), name)
				worst = math.Max(worst, math.Sqrt(dn)/(u*math.Sqrt(gn)))
			}
			require.Greater(t, changed, 0, "the gradients are rounded")
			t.Logf("max ‖Δg‖/(u·‖g‖) = %.2f (bound 2√(R+R') = %.2f)", worst, 2*sqrtR)
		})
	}
}
