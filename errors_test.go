package mtrl_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// TestBadInput tries each kind of bad input across the packages: every one must return an error
// that wraps the right sentinel and names the op and the argument, and none may panic.
func TestBadInput(t *testing.T) {
	f32 := func(shape ...int) *tensor.Tensor {
		return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
	}
	ones := func(shape ...int) *tensor.Tensor {
		x := f32(shape...)
		v, _ := x.Float32s()
		for i := range v {
			v[i] = 1
		}
		return x
	}
	nanLogits := f32(2, 3)
	v, _ := nanLogits.Float32s()
	v[4] = float32(math.NaN())

	cases := []struct {
		kind     string
		call     func() error
		sentinel error
		op, arg  string
	}{
		{"wrong shape", func() error { _, err := tensor.MaskedMean(f32(2, 3), f32(3, 2)); return err },
			tensor.ErrShape, "tensor.MaskedMean", "mask"},
		{"mismatched lengths", func() error {
			return advantage.Compute(f32(4, 5), advantage.Inputs{Rewards: f32(4, 5), ResponseMask: ones(4, 5), Index: tensor.Must(tensor.FromInt32([]int32{0, 0, 1}, 3))}, advantage.Config{Estimator: advantage.EstimatorGRPO})
		}, tensor.ErrShape, "advantage.Compute", "Inputs.Index"},
		{"top_p = 1.5", func() error { _, err := tprl.EntropyMask(f32(2, 4), f32(2, 4), ones(2, 4), 1.5); return err },
			tensor.ErrParam, "tprl.EntropyMask", "p"},
		{"empty batch", func() error {
			_, err := tprl.UpdateConfig{Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)}.Prepare(tprl.MiniBatch{ResponseMask: f32(0, 4), OldLogProbs: f32(0, 4), Advantages: f32(0, 4)})
			return err
		}, tensor.ErrShape, "tprl.UpdateConfig.Prepare", "ResponseMask"},
		{"empty vocabulary", func() error {
			return tensor.LogProbs(f32(2), f32(2, 0), tensor.Must(tensor.New(tensor.CPU(), tensor.Int32, 2)), 1)
		}, tensor.ErrShape, "tensor.LogProbs", "logits"},
		{"NaN logits", func() error { return tensor.CheckFinite("trainer.step", "logits", nanLogits) },
			tensor.ErrNotFinite, "trainer.step", "logits"},
		{"NaN advantages with CheckFinite", func() error {
			adv := f32(2, 3)
			a, _ := adv.Float32s()
			a[1] = float32(math.NaN())
			_, err := ppo.PolicyLoss(ppo.Grad{}, ppo.PolicyInputs{OldLogProbs: f32(2, 3), LogProbs: f32(2, 3), Advantages: adv, ResponseMask: ones(2, 3)},
				ppo.PolicyConfig{ClipDual: 3, TauPos: 1, TauNeg: 1, CheckFinite: true})
			return err
		}, tensor.ErrNotFinite, "ppo.PolicyLoss", "Advantages"},
		{"unknown loss type", func() error { _, err := ppo.ParseLossType("ppo2"); return err },
			tensor.ErrParam, "ppo.ParseLossType", ""},
		{"unknown KL penalty", func() error { _, err := divergence.ParseKind("kl2"); return err },
			tensor.ErrParam, "divergence.ParseKind", ""},
		{"group of one", func() error {
			return advantage.Compute(f32(3, 2), advantage.Inputs{Rewards: f32(3, 2), ResponseMask: ones(3, 2), Index: tensor.Must(tensor.FromInt32([]int32{0, 0, 1}, 3))}, advantage.Config{Estimator: advantage.EstimatorGRPO})
		}, tensor.ErrParam, "advantage.Compute", "Inputs.Index"},
		{"horizon 0", func() error { _, err := divergence.NewAdaptive(0.1, 6, 0); return err },
			tensor.ErrParam, "divergence.NewAdaptive", "Horizon"},
		{"patch size 0", func() error {
			img := tensor.Must(tensor.New(tensor.CPU(), tensor.Uint8, 8, 8, 3))
			return perturb.Blackening{PatchSize: 0, Prob: 0.5}.Apply(img, img, 1, 0)
		}, tensor.ErrParam, "perturb.Blackening.Apply", "PatchSize"},
		{"temperature 0", func() error {
			return tensor.LogProbs(f32(2), f32(2, 3), tensor.Must(tensor.New(tensor.CPU(), tensor.Int32, 2)), 0)
		}, tensor.ErrParam, "tensor.LogProbs", "temperature"},
		{"token id out of vocabulary", func() error {
			return tensor.LogProbs(f32(1), f32(1, 3), tensor.Must(tensor.FromInt32([]int32{3}, 1)), 1)
		}, tensor.ErrParam, "tensor.LogProbs", "targets"},
		{"dtype", func() error {
			_, err := tensor.MaskedMean(tensor.Must(tensor.New(tensor.CPU(), tensor.Int32, 2)), f32(2))
			return err
		},
			tensor.ErrDType, "tensor.MaskedMean", "values"},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				err = c.call()
			}()
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("got %v, want an error wrapping %v", err, c.sentinel)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.op) || (c.arg != "" && !strings.Contains(msg, c.arg)) {
				t.Errorf("%q does not name op %q and argument %q", msg, c.op, c.arg)
			}
		})
	}
}
