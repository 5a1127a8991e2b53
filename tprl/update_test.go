package tprl_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/stretchr/testify/require"
)

func updateInputs(r *rand.Rand, b, t int) (mb tprl.MiniBatch, logp, ent *tensor.Tensor) {
	f := func(scale float64, off float32) *tensor.Tensor {
		v := make([]float32, b*t)
		for i := range v {
			v[i] = float32(r.NormFloat64()*scale) + off
		}
		return tensor.Must(tensor.FromFloat32(v, b, t))
	}
	mask := make([]float32, b*t)
	for i := range b {
		n := 1 + r.IntN(t)
		for j := range n {
			mask[i*t+j] = 1
		}
	}
	old := f(0.5, -1)
	oldv, _ := old.Float32s()
	lpv, augv, refv := make([]float32, b*t), make([]float32, b*t), make([]float32, b*t)
	for i, x := range oldv {
		lpv[i] = x + float32(0.1*r.NormFloat64())
		augv[i] = x + float32(r.NormFloat64())
		refv[i] = x + float32(0.2*r.NormFloat64())
	}
	mb = tprl.MiniBatch{ResponseMask: tensor.Must(tensor.FromFloat32(mask, b, t)), OldLogProbs: old, Advantages: f(1, 0),
		AugLogProbs: tensor.Must(tensor.FromFloat32(augv, b, t)), RefLogProbs: tensor.Must(tensor.FromFloat32(refv, b, t))}
	return mb, tensor.Must(tensor.FromFloat32(lpv, b, t)), f(1, 2)
}

// runUpdate runs every micro-batch of size micro and returns the concatenated gradient and the
// summed loss.
func runUpdate(t *testing.T, cfg tprl.UpdateConfig, mb tprl.MiniBatch, logp, ent *tensor.Tensor, micro int) ([]float32, float64) {
	u, err := cfg.Prepare(mb)
	require.NoError(t, err)
	b, cols := logp.Dim(0), logp.Dim(1)
	grad := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, b, cols))
	var total float64
	for lo := 0; lo < b; lo += micro {
		hi := min(lo+micro, b)
		res, err := u.MicroBatch(tensor.Must(grad.Rows(lo, hi)), tprl.MicroInputs{LogProbs: tensor.Must(logp.Rows(lo, hi)), Entropy: tensor.Must(ent.Rows(lo, hi))}, lo, hi)
		require.NoError(t, err)
		total += float64(res.Loss)
	}
	g, _ := grad.Float32s()
	return g, total
}

// With token-mean aggregation, global token scaling and the default global shaping scope, the
// gradient of a row and the summed loss do not depend on how the mini-batch is split.
func TestUpdateMicroBatchSplitInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	mb, logp, ent := updateInputs(r, 12, 9)
	cfg := tprl.UpdateConfig{
		Tokens: tprl.Config{EnableEntropyFiltering: true, TopPEntropyTokens: 0.5, EnablePerceptionFiltering: true,
			TopPPerceptionTokens: 0.4, EnableTrajectoryReweighting: true, TrajectoryScalingMin: 0.8},
		Policy:         ppo.DefaultPolicyConfig(ppo.Vanilla),
		KLLoss:         &ppo.KLConfig{Kind: divergence.LowVarKL, Coef: 0.05},
		EntropyPenalty: &ppo.EntropyConfig{Coef: 0.01},
	}
	want, wantLoss := runUpdate(t, cfg, mb, logp, ent, 12)
	for _, micro := range []int{1, 2, 5, 7} {
		got, loss := runUpdate(t, cfg, mb, logp, ent, micro)
		require.InDeltaSlice(t, toF64(want), toF64(got), 1e-6, "micro=%d", micro)
		require.InDelta(t, wantLoss, loss, 1e-5, "micro=%d", micro)
	}
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func TestUpdateMaskedTokensGetNoGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	mb, logp, ent := updateInputs(r, 6, 11)
	cfg := tprl.UpdateConfig{Tokens: tprl.Config{EnablePerceptionFiltering: true, TopPPerceptionTokens: 0.3},
		Policy: ppo.DefaultPolicyConfig(ppo.GSPO), EntropyPenalty: &ppo.EntropyConfig{Coef: 0.1}}
	g, _ := runUpdate(t, cfg, mb, logp, ent, 2)
	m, _ := mb.ResponseMask.Float32s()
	for i, w := range m {
		if w == 0 {
			require.Zero(t, g[i], "padding position %d", i)
		}
	}
}

func TestUpdateBadInput(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	mb, logp, ent := updateInputs(r, 4, 5)
	cfg := tprl.UpdateConfig{Tokens: tprl.Config{EnablePerceptionFiltering: true, TopPPerceptionTokens: 0.3},
		Policy: ppo.DefaultPolicyConfig(ppo.Vanilla)}
	noAug := mb
	noAug.AugLogProbs = nil
	_, err := cfg.Prepare(noAug)
	require.ErrorIs(t, err, tensor.ErrShape)
	require.ErrorContains(t, err, "AugLogProbs")

	bad := cfg
	bad.Tokens.TopPPerceptionTokens = 1.5
	_, err = bad.Prepare(mb)
	require.ErrorIs(t, err, tensor.ErrParam)
	require.ErrorContains(t, err, "top_p_perception_tokens")

	// The zero Policy is an error pointing to ppo.DefaultPolicyConfig, not silently the defaults.
	bad = cfg
	bad.Policy = ppo.PolicyConfig{}
	_, err = bad.Prepare(mb)
	require.ErrorIs(t, err, tensor.ErrParam)
	require.ErrorContains(t, err, "DefaultPolicyConfig")

	// The KL term's aggregation belongs to the update; setting it is an error, not ignored.
	bad = cfg
	bad.KLLoss = &ppo.KLConfig{Kind: divergence.KL, Coef: 0.1, Agg: ppo.Agg{Mode: ppo.Seq}}
	_, err = bad.Prepare(mb)
	require.ErrorIs(t, err, tensor.ErrParam)
	require.ErrorContains(t, err, "KLLoss.Agg")
	bad.KLLoss = &ppo.KLConfig{Kind: divergence.Kind(99), Coef: 0.1}
	require.ErrorContains(t, bad.Validate(), "KLLoss.Kind")
	bad.KLLoss, bad.EntropyPenalty = nil, &ppo.EntropyConfig{Coef: math.NaN()}
	require.ErrorContains(t, bad.Validate(), "EntropyPenalty.Coef")

	u, err := cfg.Prepare(mb)
	require.NoError(t, err)
	grad := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4, 5))
	_, err = u.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp, Entropy: ent}, 2, 9)
	require.True(t, errors.Is(err, tensor.ErrParam), "%v", err)
	_, err = u.MicroBatch(grad, tprl.MicroInputs{LogProbs: logp, Entropy: ent}, 0, 2) // logp has 4 rows, the range 2
	require.ErrorIs(t, err, tensor.ErrShape)
}

// The update sets each loss's gradient scale and accumulation per micro-batch (ppo.Grad), so no
// field of its configuration may hold them: a configured value would pass Validate and be
// overwritten without a word (UpdateConfig{Policy: {GradOptions: {Scale: 2}}} did).
func TestUpdateConfigHoldsNoGradientOptions(t *testing.T) {
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			switch f.Name {
			case "GradOptions", "Scale", "Accumulate":
				t.Errorf("tprl.UpdateConfig%s.%s is a gradient option the update would overwrite", path, f.Name)
			}
			walk(path+"."+f.Name, f.Type)
		}
	}
	walk("", reflect.TypeFor[tprl.UpdateConfig]())
}
