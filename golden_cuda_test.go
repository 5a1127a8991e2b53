//go:build cuda

package mtrl_test

// The golden runner on the CUDA backend (build tag cuda; GPU machines only, see package cuda).
// TestGoldenCUDA runs the cases of the ops that have device kernels with every input moved to
// the device (tensor.To) and the outputs copied back before comparison, so the device kernels
// are what the reference vectors check. MTRL_CUDA_DEVICE selects the device (default 0); a
// missing device skips visibly, or fails when MTRL_REQUIRE_CUDA=1.

import (
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
)

// cudaGolden returns handlers for the ops with CUDA kernels, running on backend be.
func cudaGolden(be tensor.Backend) map[string]goldenHandler {
	on := func(c *golden.Case, t *tensor.Tensor) *tensor.Tensor {
		d, err := tensor.To(be, t)
		if err != nil {
			c.T.Fatalf("copy to %s: %v", be.Name(), err)
		}
		return d
	}
	back := func(c *golden.Case, t *tensor.Tensor) *tensor.Tensor {
		h, err := tensor.To(tensor.CPU(), t)
		if err != nil {
			c.T.Fatalf("copy from %s: %v", be.Name(), err)
		}
		return h
	}
	// advOuts moves a case's rewards and mask to the device and allocates the advantages and
	// returns there; advCheck copies them back and compares them.
	advOuts := func(c *golden.Case) (adv, ret, rewards, mask *tensor.Tensor) {
		rewards = on(c, c.F32("token_level_rewards"))
		mask = on(c, c.F32("response_mask"))
		adv = tensor.Must(tensor.NewLike(rewards, tensor.Float32))
		ret = tensor.Must(tensor.NewLike(rewards, tensor.Float32))
		return adv, ret, rewards, mask
	}
	advCheck := func(c *golden.Case, adv, ret *tensor.Tensor, err error) error {
		if err != nil {
			return err
		}
		c.Check("advantages", back(c, adv))
		c.Check("returns", back(c, ret))
		return nil
	}
	return map[string]goldenHandler{
		"log_probs_entropy": func(c *golden.Case) error {
			logits, ys := on(c, c.F32("logits")), on(c, c.I32("responses"))
			lp := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			ent := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			err := tensor.LogProbEntropy(lp, ent, logits, ys, float32(c.Float("temperature")))
			if err == nil {
				c.Check("log_probs", back(c, lp))
				c.Check("entropy", back(c, ent))
			}
			return err
		},
		"masked_mean": func(c *golden.Case) error {
			v, m := on(c, c.F32("values")), on(c, c.F32("mask"))
			if c.Params["dim"] == nil {
				got, err := tensor.MaskedMean(v, m)
				c.Check("mean", got)
				return err
			}
			if d := c.Int("dim"); d != -1 {
				c.T.Fatalf("unsupported dim %d", d) // the vectors' format (../shared/golden/FORMAT.md §5.11) defines null and -1 only
			}
			dst := tensor.Must(tensor.New(be, tensor.Float32, v.Dim(0)))
			err := tensor.MaskedMeanRows(dst, v, m)
			c.Check("mean", back(c, dst))
			return err
		},
		"masked_var": func(c *golden.Case) error {
			got, err := tensor.MaskedVar(on(c, c.F32("values")), on(c, c.F32("mask")), c.Bool("unbiased"))
			c.Check("var", got)
			return err
		},
		"masked_whiten": func(c *golden.Case) error {
			v := on(c, c.F32("values"))
			dst := tensor.Must(tensor.NewLike(v, tensor.Float32))
			err := tensor.MaskedWhiten(dst, v, on(c, c.F32("mask")))
			c.Check("whitened", back(c, dst))
			return err
		},
		"compute_kl": func(c *golden.Case) error {
			kind, err := divergence.ParseKind(c.String("kl_penalty"))
			if err != nil {
				return err
			}
			lp, ref := on(c, c.F32("log_probs")), on(c, c.F32("ref_log_probs"))
			shape := lp.Shape()
			if kind == divergence.Full && len(shape) > 0 {
				shape = shape[:len(shape)-1]
			}
			dst := tensor.Must(tensor.New(be, tensor.Float32, shape...))
			err = divergence.Penalty(dst, lp, ref, kind)
			c.Check("kl", back(c, dst))
			return err
		},
		"compute_rewards": func(c *golden.Case) error {
			scores := on(c, c.F32("token_level_scores"))
			dst := tensor.Must(tensor.NewLike(scores, tensor.Float32))
			err := divergence.Rewards(dst, scores, on(c, c.F32("log_probs")), on(c, c.F32("ref_log_probs")), float32(c.Float("kl_ratio")))
			c.Check("rewards", back(c, dst))
			return err
		},
		"average_loss": func(c *golden.Case) error {
			agg, err := goldenAgg(c, "mode")
			if err != nil {
				return err
			}
			values, mask := on(c, c.F32("values")), on(c, c.F32("mask"))
			loss, err := agg.Loss(values, mask)
			if err != nil {
				return err
			}
			c.Check("loss", loss)
			g := tensor.Must(tensor.NewLike(values, tensor.Float32))
			l2, err := agg.LossGrad(g, values, mask)
			if err != nil {
				return err
			}
			if l2 != loss {
				c.T.Errorf("Agg.LossGrad = %v, Agg.Loss = %v", l2, loss)
			}
			// The gradient is m/(S+eps) etc.: compare it with the CPU backend's bit for bit.
			gh := tensor.Must(tensor.NewLike(c.F32("values"), tensor.Float32))
			if _, err := agg.LossGrad(gh, c.F32("values"), c.F32("mask")); err != nil {
				return err
			}
			gd, _ := back(c, g).Float32s()
			gw, _ := gh.Float32s()
			for i := range gw {
				if math.Float32bits(gd[i]) != math.Float32bits(gw[i]) {
					c.T.Errorf("grad[%d] = %v on the device, %v on the CPU", i, gd[i], gw[i])
					break
				}
			}
			return nil
		},
		"policy_loss": func(c *golden.Case) error {
			lt, err := ppo.ParseLossType(c.String("loss_type"))
			if err != nil {
				return err
			}
			agg, err := goldenAgg(c, "loss_avg_mode")
			if err != nil {
				return err
			}
			cfg := ppo.PolicyConfig{
				LossType: lt,
				ClipLow:  c.Float("clip_ratio_low"),
				ClipHigh: c.Float("clip_ratio_high"),
				ClipDual: c.Float("clip_ratio_dual"),
				TauPos:   c.FloatOr("tau_positive", ppo.DefaultTauPos),
				TauNeg:   c.FloatOr("tau_negative", ppo.DefaultTauNeg),
				Agg:      agg,
			}
			in := ppo.PolicyInputs{
				OldLogProbs:  on(c, c.F32("old_log_probs")),
				LogProbs:     on(c, c.F32("log_probs")),
				Advantages:   on(c, c.F32("advantages")),
				ResponseMask: on(c, c.F32("response_mask")),
			}
			if c.HasIn("loss_token_mask") {
				in.TokenMask = on(c, c.F32("loss_token_mask"))
			}
			grad := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
			res, err := ppo.PolicyLoss(grad, in, cfg)
			if err != nil {
				return err
			}
			c.Check("pg_loss", res.PGLoss)
			c.Check("grad_log_probs", back(c, grad))
			c.CheckMetrics(ppoMetricLists(res.Metrics()))
			fwd, err := ppo.PolicyLoss(nil, in, cfg)
			if err != nil {
				return err
			}
			if fwd != res {
				c.T.Errorf("forward-only result %+v differs from %+v", fwd, res)
			}
			return nil
		},
		"value_loss": func(c *golden.Case) error {
			agg, err := goldenAgg(c, "loss_avg_mode")
			if err != nil {
				return err
			}
			in := ppo.ValueInputs{
				VPreds:       on(c, c.F32("vpreds")),
				Returns:      on(c, c.F32("returns")),
				Values:       on(c, c.F32("values")),
				ResponseMask: on(c, c.F32("response_mask")),
			}
			grad := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
			res, err := ppo.ValueLoss(grad, in, ppo.ValueConfig{ClipRange: c.Float("cliprange_value"), Agg: agg})
			if err != nil {
				return err
			}
			c.Check("vf_loss", res.VFLoss)
			c.Check("grad_vpreds", back(c, grad))
			c.CheckMetrics(ppoMetricLists(res.Metrics()))
			return nil
		},
		"gae": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.GAE(adv, ret, r, on(c, c.F32("values")), m, c.Float("gamma"), c.Float("lam"))
			return advCheck(c, adv, ret, err)
		},
		"grpo": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.GRPO(adv, ret, r, m, on(c, c.I32("index")), advantage.GRPOOptions{Eps: c.FloatOr("eps", advantage.DefaultEps)})
			return advCheck(c, adv, ret, err)
		},
		"grpo_passk": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.GRPOPassK(adv, ret, r, m, on(c, c.I32("index")), advantage.GRPOOptions{Eps: c.FloatOr("eps", advantage.DefaultEps)})
			return advCheck(c, adv, ret, err)
		},
		"rloo": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.RLOO(adv, ret, r, m, on(c, c.I32("index")))
			return advCheck(c, adv, ret, err)
		},
		"reinforce_plus_plus": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.ReinforcePlusPlus(adv, ret, r, m, c.Float("gamma"))
			return advCheck(c, adv, ret, err)
		},
		"remax": func(c *golden.Case) error {
			adv, ret, r, m := advOuts(c)
			err := advantage.ReMax(adv, ret, r, m, on(c, c.F32("reward_baselines")))
			return advCheck(c, adv, ret, err)
		},
		"patch_blackening": func(c *golden.Case) error {
			// The recorded draws are replayed through the grid; the device kernel of
			// Blackening.ApplyBatch (perturb.BlackenKernel) blackens the image as a batch of one.
			img := c.U8("image")
			h, w := img.Dim(0), img.Dim(1)
			ps := c.Int("patch_size")
			grid, err := perturb.PatchGrid(h, w, ps, c.Float("black_prob"), c.In("draws").Data)
			if err != nil {
				return err
			}
			want := c.In("grid")
			if len(want.Data) != len(grid.Black) || want.Shape[0] != grid.Rows || want.Shape[1] != grid.Cols {
				c.T.Errorf("grid is %d×%d, recorded %v", grid.Rows, grid.Cols, want.Shape)
			}
			k, ok := be.(perturb.BlackenKernel)
			if !ok {
				c.T.Fatalf("%s does not implement perturb.BlackenKernel", be.Name())
			}
			batch := tensor.Must(img.Reshape(append([]int{1}, img.Shape()...)...))
			src := on(c, batch)
			dst := tensor.Must(tensor.NewLike(src, tensor.Uint8))
			if err := k.BlackenBatch(dst, src, []perturb.Grid{grid}, ps); err != nil {
				return err
			}
			out := tensor.Must(back(c, dst).Reshape(img.Shape()...))
			c.Check("image", out)
			return nil
		},
	}
}

func TestGoldenCUDA(t *testing.T) {
	n := 0
	if s := os.Getenv("MTRL_CUDA_DEVICE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	be, err := cuda.New(n)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(%d): %v", n, err)
		}
		t.Skipf("SKIP: no CUDA device %d: %v", n, err)
	}
	defer be.Close()
	handlers := cudaGolden(be)
	ran := 0
	for _, dir := range goldenDirs(t) {
		files, err := golden.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			h, ok := handlers[f.Op]
			if !ok {
				continue // no device kernel: the CPU runner (TestGolden) covers it
			}
			ran++
			t.Run(f.Op, func(t *testing.T) {
				for _, c := range f.Cases {
					t.Run(c.Name, func(t *testing.T) { runGoldenCase(t, h, c) })
				}
			})
		}
	}
	if ran == 0 {
		t.Error("no golden file has an op with a CUDA handler")
	}
}
