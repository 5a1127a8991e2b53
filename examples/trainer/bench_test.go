package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// The twin workload: the VPPO step at the default config's shapes, which
// scripts/vlm_torch_twin.py runs in PyTorch on the same weights and inputs (scripts/vlm-vs-torch
// prints both side by side). 16 prompts × 8 responses of exactly 24 tokens (EOS is made
// unreachable so both sides do the same work), prompts of 14 to 19 tokens (the generated
// task's lengths), text length 19 + 24 = 43 after 16 image patches, vocabulary 73.
const (
	twinPrompts   = 16
	twinN         = 8
	twinRows      = twinPrompts * twinN
	twinResp      = 24
	twinMaxPrompt = 19
	twinVocab     = 73
	twinMicroExp  = 32 // micro_batch_size_per_device_for_experience
	twinMiniRows  = 8 * twinN
	twinMicroUpd  = 16 // micro_batch_size_per_device_for_update
	twinLR        = 2e-4
	twinCheckRows = 8 // rows of the logits / gradient / greedy agreement check
)

// twinPromptLens cycles through the generated task's prompt lengths.
var twinPromptLens = []int{14, 15, 19, 18, 15, 14, 18, 15}

// twinSetup is everything both implementations start from.
type twinSetup struct {
	policy, ref       *vlm.Model
	images, perturbed *tensor.Tensor // [rows, 32, 32, 3] uint8
	prompts           [][]int32      // per row, BOS first
	t                 *Trainer       // only for its response gather/scatter (forwardResponse)
}

func newTwinSetup(tb testing.TB) *twinSetup {
	tb.Helper()
	cfg := vlm.DefaultConfig(twinVocab)
	cfg.MaxLen = twinMaxPrompt + twinResp
	policy, err := vlm.New(cfg, 1)
	if err != nil {
		tb.Fatal(err)
	}
	ref, err := vlm.New(cfg, 2)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range policy.Params() {
		if p.Name == "head.b" { // EOS unreachable: every response has exactly twinResp tokens
			hb, _ := p.W.Float32s()
			hb[vlm.EOS] = -30
		}
	}
	s := &twinSetup{policy: policy, ref: ref, t: &Trainer{cfg: DefaultConfig(), respLen: twinResp, maxPrompt: twinMaxPrompt}}
	hw := cfg.ImageSize * cfg.ImageSize * cfg.Channels
	img, pert := make([]uint8, twinRows*hw), make([]uint8, twinRows*hw)
	ps := cfg.PatchSize
	for r := range twinRows {
		g := r / twinN
		prompt := []int32{vlm.BOS}
		for t := 1; t < twinPromptLens[g%len(twinPromptLens)]; t++ {
			prompt = append(prompt, int32(3+(g*7+t*5)%(twinVocab-3)))
		}
		s.prompts = append(s.prompts, prompt)
		for i := range hw {
			img[r*hw+i] = uint8((g*37 + i*11) % 256)
			y, x := i/(cfg.ImageSize*cfg.Channels), i/cfg.Channels%cfg.ImageSize
			patch := (y/ps)*(cfg.ImageSize/ps) + x/ps
			if (patch+r)%2 != 0 { // every other patch blackened, a fixed perturbation
				pert[r*hw+i] = img[r*hw+i]
			}
		}
	}
	s.images = tensor.Must(tensor.FromUint8(img, twinRows, cfg.ImageSize, cfg.ImageSize, cfg.Channels))
	s.perturbed = tensor.Must(tensor.FromUint8(pert, twinRows, cfg.ImageSize, cfg.ImageSize, cfg.Channels))
	return s
}

// batchOf lays out sampled responses like the trainer's newBatch.
func (s *twinSetup) batchOf(tb testing.TB, resp [][]int32) *batch {
	exs := make([]example, len(resp))
	hw, _ := s.images.Uint8s()
	n := len(hw) / twinRows
	for i := range exs {
		exs[i] = example{img: hw[i*n : (i+1)*n], prompt: s.prompts[i]}
	}
	b, err := s.t.newBatch(exs, resp)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// twinTimes are one step's phase durations.
type twinTimes struct{ rollout, logprobs, update time.Duration }

// twinStep runs one VPPO step: rollout, three log-prob passes (old with entropies, perturbed
// images, reference), and the update (two mini-batches of 64 rows in micro-batches of 16:
// forward, log-probs and entropies, the clipped-ratio surrogate's gradient, backward; then
// gradient clipping and AdamW). It returns the generated token count.
func (s *twinSetup) twinStep(tb testing.TB, opt *loop.AdamW, decay []bool, step int) (twinTimes, int) {
	var tt twinTimes
	t0 := time.Now()
	rngs := make([]*rand.Rand, twinRows)
	for r := range rngs {
		rngs[r] = rand.New(rand.NewPCG(uint64(step), uint64(r)))
	}
	resp, err := s.policy.GenerateRows(s.images, s.prompts, twinResp, 1, 1, -1, rngs)
	if err != nil {
		tb.Fatal(err)
	}
	generated := 0
	for _, r := range resp {
		generated += len(r)
	}
	b := s.batchOf(tb, resp)
	tt.rollout = time.Since(t0)

	t0 = time.Now()
	f32 := func(shape ...int) *tensor.Tensor {
		return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
	}
	old, ent, aug, ref := f32(twinRows, twinResp), f32(twinRows, twinResp), f32(twinRows, twinResp), f32(twinRows, twinResp)
	pass := func(m *vlm.Model, images, logp, entropy *tensor.Tensor) {
		for lo := 0; lo < twinRows; lo += twinMicroExp {
			hi := lo + twinMicroExp
			ml, record, err := s.t.forwardResponse(m, b, tensorRows(images, lo, hi), lo, hi)
			if err != nil {
				tb.Fatal(err)
			}
			record.Release()
			var ent *tensor.Tensor
			if entropy != nil {
				ent = tensor.Must(entropy.Rows(lo, hi))
			}
			if err := ml.logProbs(tensor.Must(logp.Rows(lo, hi)), ent, 1); err != nil {
				tb.Fatal(err)
			}
			ml.release()
		}
	}
	pass(s.policy, b.images, old, ent)
	pass(s.policy, s.perturbed, aug, nil)
	pass(s.ref, b.images, ref, nil)
	tt.logprobs = time.Since(t0)

	t0 = time.Now()
	oldv, _ := old.Float32s()
	for mlo := 0; mlo < twinRows; mlo += twinMiniRows {
		s.policy.ZeroGrad()
		for lo := mlo; lo < mlo+twinMiniRows; lo += twinMicroUpd {
			hi := lo + twinMicroUpd
			ml, record, err := s.t.forwardResponse(s.policy, b, tensorRows(b.images, lo, hi), lo, hi)
			if err != nil {
				tb.Fatal(err)
			}
			logp, entropy, dlogp := f32(hi-lo, twinResp), f32(hi-lo, twinResp), f32(hi-lo, twinResp)
			if err := ml.logProbs(logp, entropy, 1); err != nil {
				tb.Fatal(err)
			}
			// loss = -Σ adv·exp(logp - old) / tokens of the mini-batch, adv = ±1 by row
			lv, _ := logp.Float32s()
			dv, _ := dlogp.Float32s()
			for i := range dv {
				adv := float32(1 - 2*((lo+i/twinResp)%2))
				dv[i] = -adv * float32(math.Exp(float64(lv[i]-oldv[lo*twinResp+i]))) / (twinMiniRows * twinResp)
			}
			dlogits, err := ml.dLogits(dlogp, 1)
			if err != nil {
				tb.Fatal(err)
			}
			err = s.t.backwardResponse(s.policy, b, record, dlogits, lo, hi)
			ml.release()
			record.Release()
			if err != nil {
				tb.Fatal(err)
			}
		}
		ws, gs := paramSlices(s.policy)
		loop.ClipGradNorm(gs, 1)
		if err := opt.Update(ws, gs, decay, twinLR); err != nil {
			tb.Fatal(err)
		}
	}
	tt.update = time.Since(t0)
	return tt, generated
}

func decayFlags(m *vlm.Model) []bool {
	var d []bool
	for _, p := range m.Params() {
		d = append(d, len(p.W.Shape()) >= 2)
	}
	return d
}

// BenchmarkVPPOStep times the twin workload's step and its phases (medians over the
// iterations): rollout tokens/s counts generated tokens (prefill included in the time),
// log-prob and update tokens/s count the text tokens of the sequences scored (rows × 43,
// three passes for the log-probs), step tokens/s rows × 43 per step.
func BenchmarkVPPOStep(b *testing.B) {
	s := newTwinSetup(b)
	opt := loop.NewAdamW(sizesOf(s.policy), 0.9, 0.999, 1e-8, 1e-2)
	decay := decayFlags(s.policy)
	var ro, lp, up, st []float64
	gen := 0
	for i := 0; b.Loop(); i++ {
		tt, g := s.twinStep(b, opt, decay, i)
		gen = g
		ro, lp, up = append(ro, tt.rollout.Seconds()), append(lp, tt.logprobs.Seconds()), append(up, tt.update.Seconds())
		st = append(st, (tt.rollout + tt.logprobs + tt.update).Seconds())
	}
	text := float64(twinRows * (twinMaxPrompt + twinResp))
	b.ReportMetric(float64(gen)/median(ro), "rollout-tok/s")
	b.ReportMetric(3*text/median(lp), "logprob-tok/s")
	b.ReportMetric(text/median(up), "update-tok/s")
	b.ReportMetric(text/median(st), "step-tok/s")
	b.ReportMetric(1e3*median(ro), "rollout-ms")
	b.ReportMetric(1e3*median(lp), "logprob-ms")
	b.ReportMetric(1e3*median(up), "update-ms")
	b.ReportMetric(1e3*median(st), "step-ms")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TestTwinFixture writes what the PyTorch twin needs into $VLM_TWIN_DIR (skipped without it):
// the policy's and reference's weights (the trainer's checkpoint format, Go's [in, out]
// layout), the benchmark's inputs, and for the first rows Go's logits, parameter gradients of
// sum(R ⊙ logits) for a fixed R, and greedy KV-cached responses, which the twin must reproduce.
func TestTwinFixture(t *testing.T) {
	dir := os.Getenv("VLM_TWIN_DIR")
	if dir == "" {
		t.Skip("set VLM_TWIN_DIR to write the PyTorch twin's fixture")
	}
	s := newTwinSetup(t)
	save := func(name string, ts []NamedTensor) {
		data, err := EncodeSafetensors(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	weights := func(m *vlm.Model, grad bool) []NamedTensor {
		var ts []NamedTensor
		for _, p := range m.Params() {
			src := p.W
			if grad {
				src = p.G
			}
			v, _ := src.Float32s()
			ts = append(ts, NamedTensor{Name: p.Name, Shape: p.W.Shape(), Data: slices.Clone(v)})
		}
		return ts
	}
	save("policy.safetensors", weights(s.policy, false))
	save("ref.safetensors", weights(s.ref, false))

	asF32 := func(x []uint8) []float32 {
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = float32(v)
		}
		return out
	}
	img, _ := s.images.Uint8s()
	pert, _ := s.perturbed.Uint8s()
	prompts := make([]float32, twinRows*twinMaxPrompt)
	plen := make([]float32, twinRows)
	for r, p := range s.prompts {
		plen[r] = float32(len(p))
		for i, id := range p {
			prompts[r*twinMaxPrompt+i] = float32(id)
		}
	}
	c := s.policy.Config
	imShape := []int{twinRows, c.ImageSize, c.ImageSize, c.Channels}

	// The agreement check on the first rows: greedy responses, logits and gradients.
	k := twinCheckRows
	kImages := tensor.Must(s.images.Rows(0, k))
	greedy, err := s.policy.Generate(kImages, s.prompts[:k], twinResp, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.batchOf(t, append(greedy, make([][]int32, twinRows-k)...))
	tokens := tensor.Must(b.tokens.Rows(0, k))
	logits, act, err := s.policy.Forward(kImages, tokens)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	R := make([]float32, logits.Len())
	for i := range R {
		R[i] = float32(rng.NormFloat64())
	}
	s.policy.ZeroGrad()
	if err := s.policy.Backward(act, tensor.Must(tensor.FromFloat32(R, logits.Shape()...))); err != nil {
		t.Fatal(err)
	}
	L := twinMaxPrompt + twinResp
	tokv, _ := tokens.Int32s()
	greedyv := make([]float32, k*twinResp)
	for r, g := range greedy {
		for i, id := range g {
			greedyv[r*twinResp+i] = float32(id)
		}
	}
	lv, _ := logits.Float32s()
	tokf := make([]float32, len(tokv))
	for i, id := range tokv {
		tokf[i] = float32(id)
	}
	inputs := []NamedTensor{
		{Name: "images", Shape: imShape, Data: asF32(img)},
		{Name: "perturbed", Shape: imShape, Data: asF32(pert)},
		{Name: "prompts", Shape: []int{twinRows, twinMaxPrompt}, Data: prompts},
		{Name: "prompt_len", Shape: []int{twinRows}, Data: plen},
		{Name: "check.tokens", Shape: []int{k, L}, Data: tokf},
		{Name: "check.logits", Shape: []int{k, L, twinVocab}, Data: slices.Clone(lv)},
		{Name: "check.R", Shape: []int{k, L, twinVocab}, Data: R},
		{Name: "check.greedy", Shape: []int{k, twinResp}, Data: greedyv},
	}
	for _, g := range weights(s.policy, true) {
		g.Name = "check.grad." + g.Name
		inputs = append(inputs, g)
	}
	save("inputs.safetensors", inputs)
	fmt.Fprintf(os.Stderr, "twin fixture: %d parameters, written to %s\n", s.policy.NumParams(), dir)
}

func paramSlices(m *vlm.Model) (ws, gs [][]float32) {
	for _, p := range m.Params() {
		w, _ := p.W.Float32s()
		g, _ := p.G.Float32s()
		ws, gs = append(ws, w), append(gs, g)
	}
	return ws, gs
}
