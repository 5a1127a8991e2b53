package qwenvl

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/tensor"
)

// towerRoundings is how many bfloat16 roundings bf16 mode makes on a patch's path through the
// tower, weights included: the pixels, the patch embedding's weight and output; per block the
// first norm, the qkv weight and output, q and k after the rotary embedding, the attention, the
// output projection's weight and output, the residual, the second norm, the MLP's first weights
// and outputs, the activation (Qwen2.5-VL: SwiGLU's product), the last weight and output, the
// residual; the merger's norm, first weight and output, GELU, last weight and output.
func towerRoundings(depth int) int { return 3 + 15*depth + 6 }

// lmRoundings is the same count for the language model's layers after the features are
// scattered in: the embedding, per layer hflm's 15 activations and the q, k, v, o, gate, up and
// down weights, the final norm and the LM head's weight.
func lmRoundings(layers int) int { return 1 + 22*layers + 2 }

// relNorm returns ‖got − want‖ / ‖want‖ and max |got − want| / max |want|.
func relNorm(want, got []float32) (norm, maxAbs float64) {
	var dn, wn, dm, wm float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		dn, wn = dn+d*d, wn+float64(w)*float64(w)
		dm, wm = max(dm, math.Abs(d)), max(wm, math.Abs(float64(w)))
	}
	return math.Sqrt(dn / wn), dm / wm
}

// TestVisionMixedPrecision checks the tower's bf16 mode against its float32 path on the golden
// models: the tower's features and the model's logits (language model in bf16 mode too), and
// the gradient of every weight of a trained tower and of the language model, each within the
// error of R independent bfloat16 roundings (relative error at most u = 2⁻⁸ each) accumulating
// as √R: ‖Δf‖ ≤ √R·u·‖f‖ for the features, max |Δ logit| ≤ √R·u·max |logit|, and
// ‖Δg‖ ≤ 2√R·u·‖g‖ per parameter (the backward reads each rounded activation and weight again).
// This is the random-walk model of hflm's TestMixedPrecisionBF16, not a worst-case bound. The
// errors must also be larger than u/64 relative: bf16 mode has to round. And it checks what
// bf16 mode computes with: the weights are the masters rounded, after an optimizer step too,
// and a training forward keeps bfloat16 activations.
func TestVisionMixedPrecision(t *testing.T) {
	u := math.Ldexp(1, -8)
	g := readModelGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var feats, logits [][]float32
			var grads []map[string][]float32
			var bf *Model
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
				require.NoError(t, m.SetMixedPrecision(dt))
				require.Equal(t, dt, m.Vision.MixedPrecision())
				require.Equal(t, dt, m.LM.MixedPrecision())
				s := goldenSample(g, m, c.IDs)
				f, a, err := m.Vision.Forward(s.Images.Values, s.Images.Grids, true)
				require.NoError(t, err)
				require.Equal(t, dt, a.blocks[0].h1.DType(), "kept activations")
				require.Equal(t, dt, a.blocks[0].xMid.DType(), "kept activations")
				require.Equal(t, dt, a.gelu.DType(), "kept activations")
				feats = append(feats, host(f))
				lg, err := m.Logits(s)
				require.NoError(t, err)
				logits = append(logits, host(lg))
				sc, err := m.Score([]Sample{s}, []int{g.Completion}, 1, true)
				require.NoError(t, err)
				d := make([]float32, g.Completion)
				for i := range d {
					d[i] = float32(math.Cos(0.7 * float64(i)))
				}
				require.NoError(t, sc.Backward([][]float32{d}, nil))
				gr := map[string][]float32{}
				for _, name := range paramNames(m) {
					gr[name] = append([]float32(nil), host(m.Grad(name))...)
				}
				grads = append(grads, gr)
				bf = m
			}
			rt := towerRoundings(bf.Config.Vision.Depth)
			rel, _ := relNorm(feats[0], feats[1])
			require.Greater(t, rel, u/64, "bf16 mode rounds")
			require.LessOrEqual(t, rel, math.Sqrt(float64(rt))*u)
			t.Logf("features: ‖Δf‖/‖f‖ = %.3g = %.2f·u (bound √R = %.2f, R = %d)", rel, rel/u, math.Sqrt(float64(rt)), rt)
			rm := rt + lmRoundings(bf.Config.Text.NumHiddenLayers)
			sqrtR := math.Sqrt(float64(rm))
			_, lmax := relNorm(logits[0], logits[1])
			require.Greater(t, lmax, u/64, "bf16 mode rounds")
			require.LessOrEqual(t, lmax, sqrtR*u)
			t.Logf("logits: max |Δ| / max |logit| = %.3g = %.2f·u (bound √R = %.2f, R = %d)", lmax, lmax/u, sqrtR, rm)
			worst, worstName := 0.0, ""
			for _, name := range paramNames(bf) {
				gn, _ := relNorm(grads[0][name], grads[1][name])
				require.LessOrEqual(t, gn, 2*sqrtR*u, name)
				if gn > worst {
					worst, worstName = gn, name
				}
			}
			t.Logf("gradients: largest ‖Δg‖/‖g‖ = %.3g = %.2f·u (%s; bound 2√R = %.2f)", worst, worst/u, worstName, 2*sqrtR)

			// Back to float32 and to bf16 again: each path's features exactly.
			v := bf.Vision
			s := goldenSample(g, bf, c.IDs)
			for i, dt := range []tensor.DType{tensor.Float32, tensor.Float32, tensor.BFloat16, tensor.BFloat16} {
				require.NoError(t, v.SetMixedPrecision(dt))
				f, _, err := v.Forward(s.Images.Values, s.Images.Grids, false)
				require.NoError(t, err)
				require.Equal(t, feats[i/2], host(f), "%v", dt)
			}
			require.Error(t, v.SetMixedPrecision(tensor.Int32))

			// The weights computed with are the masters rounded; a step below bfloat16's
			// resolution moves the float32 masters, and the copies follow their rounding.
			requireRounded := func() {
				require.NotEmpty(t, v.mp.Mats)
				for name, w := range v.mp.Mats {
					got, _ := w.Weight().BF16s()
					for i, x := range host(v.byName[name].value) {
						require.Equal(t, tensor.BF16FromFloat32(x), got[i], name)
					}
				}
				for name, w := range v.mp.Vecs {
					for i, x := range host(v.byName[name].value) {
						require.Equal(t, tensor.BF16FromFloat32(x).Float32(), host(w)[i], name)
					}
				}
			}
			requireRounded()
			opt, _, err := bf.Training(0)
			require.NoError(t, err)
			p := v.byName["visual.blocks.0.attn.qkv.weight"]
			before := append([]float32(nil), host(p.value)...)
			_, err = opt.Step(1e-5, 0)
			require.NoError(t, err)
			moved := 0
			for i, x := range host(p.value) {
				if x != before[i] {
					moved++
				}
			}
			require.Greater(t, moved, len(before)/2, "the float32 masters take the update")
			requireRounded()

		})
	}
}

// torchRoundings counts the bfloat16 roundings of the PyTorch twin in bfloat16 on a patch's
// path through the tower (more than bf16 mode's: the norms round their normalised input before
// the weight, the attention rounds its scores and probabilities, SwiGLU its SiLU, the rotary
// embedding's inputs are the qkv output's) and, for the logits, through the language model:
// the embedding, per layer the norms' two, q, k, v and their weights, the rotary embedding's
// three products and sum, the scores, the probabilities, the attention, o and its weight, the
// residual, gate, up, their weights, SiLU, the product, down and its weight, the residual; the
// final norm's two and the head's weight.
func torchRoundings(depth int) int    { return 3 + 20*depth + 7 }
func torchLMRoundings(layers int) int { return 1 + 27*layers + 3 }

// flat returns the twin's rows as float32 values.
func flat(rows [][]float64) (out []float32) {
	for _, r := range rows {
		for _, v := range r {
			out = append(out, float32(v))
		}
	}
	return out
}

// TestVisionMixedPrecisionTwin compares bf16 mode with the PyTorch twin in bfloat16
// (testdata/model_golden_bf16.json; weights and activations bfloat16 with Hugging Face's
// float32 norms and vision rotary embedding): the tower's features and the last positions'
// logits. Both are the float32 computation plus independent roundings, so by the triangle
// inequality under the random-walk model their difference is at most (√R + √R′)·u times the
// float32 values' size (R the Go count, R′ the twin's): ‖Δf‖ ≤ (√R + √R′)·u·‖f‖ and
// max |Δ logit| ≤ (√R + √R′)·u·max |logit|.
func TestVisionMixedPrecisionTwin(t *testing.T) {
	u := math.Ldexp(1, -8)
	data, err := os.ReadFile(filepath.Join("testdata", "model_golden_bf16.json"))
	require.NoError(t, err)
	var tg struct {
		Completion int `json:"completion"`
		Cases      []struct {
			Name          string      `json:"name"`
			ImageFeatures [][]float64 `json:"image_features"`
			VideoFeatures [][]float64 `json:"video_features"`
			Logits        [][]float64 `json:"logits"`
		}
	}
	require.NoError(t, json.Unmarshal(data, &tg))
	g := readModelGolden(t)
	require.Len(t, tg.Cases, len(g.Cases))
	for k, c := range g.Cases {
		tc := tg.Cases[k]
		require.Equal(t, c.Name, tc.Name)
		t.Run(c.Name, func(t *testing.T) {
			m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
			require.NoError(t, m.SetMixedPrecision(tensor.BFloat16))
			s := goldenSample(g, m, c.IDs)
			depth, layers := m.Config.Vision.Depth, m.Config.Text.NumHiddenLayers
			bt := (math.Sqrt(float64(towerRoundings(depth))) + math.Sqrt(float64(torchRoundings(depth)))) * u
			for _, f := range []struct {
				name  string
				p     Patches
				twin  [][]float64
				float [][]float64
			}{{"image", s.Images, tc.ImageFeatures, c.ImageFeatures}, {"video", s.Videos, tc.VideoFeatures, c.VideoFeatures}} {
				got, _, err := m.Vision.Forward(f.p.Values, f.p.Grids, false)
				require.NoError(t, err)
				want, ref := flat(f.twin), flat(f.float)
				require.Len(t, want, len(ref))
				var dn, rn float64
				for i, w := range want {
					d := float64(host(got)[i]) - float64(w)
					dn, rn = dn+d*d, rn+float64(ref[i])*float64(ref[i])
				}
				rel := math.Sqrt(dn / rn)
				require.LessOrEqual(t, rel, bt, f.name)
				tf, _ := relNorm(ref, want)
				t.Logf("%s features: ‖Go bf16 − torch bf16‖/‖f‖ = %.3g = %.2f·u (bound %.2f·u; torch bf16 against float32: %.2f·u)", f.name, rel, rel/u, bt/u, tf/u)
			}
			lg, err := m.Logits(s)
			require.NoError(t, err)
			v := m.Config.Text.VocabSize
			got := host(lg)[len(host(lg))-tg.Completion*v:]
			want := flat(tc.Logits)
			ref := flat(c.Logits[len(c.Logits)-tg.Completion:])
			require.Len(t, want, len(got))
			worst, size := 0.0, 0.0
			for i, w := range want {
				worst = max(worst, math.Abs(float64(got[i])-float64(w)))
				size = max(size, math.Abs(float64(ref[i])))
			}
			bl := (math.Sqrt(float64(towerRoundings(depth)+lmRoundings(layers))) + math.Sqrt(float64(torchRoundings(depth)+torchLMRoundings(layers)))) * u
			require.LessOrEqual(t, worst/size, bl)
			t.Logf("logits: max |Go bf16 − torch bf16| / max |logit| = %.3g = %.2f·u (bound %.2f·u)", worst/size, worst/(size*u), bl/u)
		})
	}
}

// TestVisionMixedPrecisionLoRA: bf16 mode with LoRA on the tower (the adapters computing in
// float32 on the bfloat16 activations): every adapter's gradient against float32's within
// TestVisionMixedPrecision's bound, and MergeLoRA rounds the merged masters into the copies.
func TestVisionMixedPrecisionLoRA(t *testing.T) {
	u := math.Ldexp(1, -8)
	g := readModelGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			grads := []map[string][]float32{{}, {}}
			var bf *Model
			for k, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
				require.NoError(t, m.SetMixedPrecision(dt))
				require.NoError(t, m.AddLoRA(hflm.LoRAConfig{Rank: 3, Alpha: 6, TargetModules: []string{`(model\.)?visual\..*`}, Seed: 5}))
				randomizeB(t, m, 1)
				s := goldenSample(g, m, c.IDs)
				sc, err := m.Score([]Sample{s}, []int{g.Completion}, 1, true)
				require.NoError(t, err)
				d := make([]float32, g.Completion)
				for i := range d {
					d[i] = float32(math.Cos(0.7 * float64(i)))
				}
				require.NoError(t, sc.Backward([][]float32{d}, nil))
				ps, err := m.Params()
				require.NoError(t, err)
				require.NotEmpty(t, ps)
				for _, p := range ps {
					grads[k][p.Name] = append([]float32(nil), host(p.Grad)...)
				}
				bf = m
			}
			sqrtR := math.Sqrt(float64(towerRoundings(bf.Config.Vision.Depth) + lmRoundings(bf.Config.Text.NumHiddenLayers)))
			worst := 0.0
			for name, want := range grads[0] {
				gn, _ := relNorm(want, grads[1][name])
				require.LessOrEqual(t, gn, 2*sqrtR*u, name)
				worst = max(worst, gn)
			}
			t.Logf("adapter gradients: largest ‖Δg‖/‖g‖ = %.2f·u (bound %.2f·u)", worst/u, 2*sqrtR)
			require.NoError(t, bf.MergeLoRA())
			v := bf.Vision
			for name, w := range v.mp.Mats {
				got, _ := w.Weight().BF16s()
				for i, x := range host(v.byName[name].value) {
					require.Equal(t, tensor.BF16FromFloat32(x), got[i], name)
				}
			}
		})
	}
}

// TestBF16Backward checks Model.SetBF16Backward on the golden models: in bf16 mode the
// backward's gradients into the linear layers (the tower's patch embedding, qkv, output, MLP
// and merger projections; the language model's seven per layer and its head) are rounded to
// bfloat16 before their products. Every weight's gradient stays within
// TestVisionMixedPrecision's random-walk bound for R roundings plus R' more, one per linear
// layer the gradient passes back through (at most 5 per block and 3 outside the blocks in the
// tower, 7 per layer and the head in the language model): ‖Δg‖ ≤ 2√(R+R')·u·‖g‖ against float32
// mode; some gradient differs from bf16 mode's without it (the rounding happens).
func TestBF16Backward(t *testing.T) {
	u := math.Ldexp(1, -8)
	g := readModelGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var grads []map[string][]float32
			var bf *Model
			for _, mode := range []struct {
				dt   tensor.DType
				grad bool
			}{{tensor.Float32, false}, {tensor.BFloat16, false}, {tensor.BFloat16, true}} {
				m := loadCase(t, filepath.Join("testdata", c.Config), c.Seed, c.DType, c.Layout)
				require.NoError(t, m.SetMixedPrecision(mode.dt))
				m.SetBF16Backward(mode.grad)
				s := goldenSample(g, m, c.IDs)
				sc, err := m.Score([]Sample{s}, []int{g.Completion}, 1, true)
				require.NoError(t, err)
				d := make([]float32, g.Completion)
				for i := range d {
					d[i] = float32(math.Cos(0.7 * float64(i)))
				}
				require.NoError(t, sc.Backward([][]float32{d}, nil))
				gr := map[string][]float32{}
				for _, name := range paramNames(m) {
					gr[name] = append([]float32(nil), host(m.Grad(name))...)
				}
				grads = append(grads, gr)
				bf = m
			}
			depth, layers := bf.Config.Vision.Depth, bf.Config.Text.NumHiddenLayers
			r := towerRoundings(depth) + lmRoundings(layers) + 5*depth + 3 + 7*layers + 1
			worst, changed := 0.0, false
			for _, name := range paramNames(bf) {
				gn, _ := relNorm(grads[0][name], grads[2][name])
				require.LessOrEqual(t, gn, 2*math.Sqrt(float64(r))*u, name)
				worst = max(worst, gn)
				changed = changed || !slices.Equal(grads[1][name], grads[2][name])
			}
			require.True(t, changed, "the gradients are rounded")
			t.Logf("gradients: largest ‖Δg‖/‖g‖ = %.2f·u (bound 2√(R+R') = %.2f)", worst/u, 2*math.Sqrt(float64(r)))
		})
	}
}
