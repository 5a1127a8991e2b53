package ppo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
)

// klLoss64 evaluates KLLoss through the public float32 API at log-probs x (float64).
func klLoss64(t *testing.T, x, ref []float64, mask *tensor.Tensor, shape []int, cfg KLConfig, scale float64) float64 {
	lp := tensor.Must(tensor.FromFloat32(f32s(x), shape...))
	rf := tensor.Must(tensor.FromFloat32(f32s(ref), shape...))
	res, err := KLLoss(Grad{Scale: scale}, lp, rf, mask, cfg)
	require.NoError(t, err)
	return float64(res.Loss)
}

func TestKLLossGradFiniteDifferences(t *testing.T) {
	// The penalties are float32 kernels of package divergence, so this check runs in float32
	// with a large step; the chain rule itself is exact.
	rng := rand.New(rand.NewPCG(41, 42))
	B, T := 3, 6
	m := randMask(rng, B, T)
	mask := ten(m, B, T)
	for _, kind := range []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL, divergence.Full} {
		for _, agg := range allAggs {
			shape := []int{B, T}
			n := B * T
			if kind == divergence.Full {
				shape, n = []int{B, T, 4}, B*T*4
			}
			lp, ref := make([]float64, n), make([]float64, n)
			for j := range n {
				lp[j] = -0.2 - 2*rng.Float64()
				ref[j] = lp[j] + 0.4 + 0.6*rng.Float64()*float64(1-2*(j%2)) // |lp - ref| >= ~0.4: no abs kink
			}
			cfg := KLConfig{Kind: kind, Coef: 0.7, Agg: agg}
			grad := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, shape...))
			res, err := KLLoss(Grad{Dst: grad, Scale: 1.5}, tensor.Must(tensor.FromFloat32(f32s(lp), shape...)), tensor.Must(tensor.FromFloat32(f32s(ref), shape...)), mask, cfg)
			require.NoError(t, err)
			require.InDelta(t, float64(res.KL)*0.7*1.5, float64(res.Loss), 1e-6)
			gv, _ := grad.Float32s()
			f := func(x []float64) float64 { return klLoss64(t, x, ref, mask, shape, cfg, 1.5) }
			gradcheck.Check(t, fmt.Sprintf("%v/%v", kind, agg.Mode), f, slices.Clone(lp), f64s(gv), 1e-2, 2e-2, 2e-4)
			v := n / (B * T)
			for j := range gv {
				if m[j/v] == 0 && gv[j] != 0 {
					t.Fatalf("%v: masked element %d has gradient %v", kind, j, gv[j])
				}
			}
		}
	}
}

func TestKLLossMatchesPenaltyAverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	b := randBatch(rng, 3, 5, 0.5, false)
	lp, ref, mask := ten(b.lp, 3, 5), ten(b.old, 3, 5), ten(b.m, 3, 5)
	pen := tensor.Must(tensor.NewLike(lp, tensor.Float32))
	require.NoError(t, divergence.Penalty(pen, lp, ref, divergence.LowVarKL))
	want, err := Agg{Mode: Seq}.Loss(pen, mask)
	require.NoError(t, err)
	res, err := KLLoss(Grad{}, lp, ref, mask, KLConfig{Kind: divergence.LowVarKL, Coef: 0.1, Agg: Agg{Mode: Seq}})
	require.NoError(t, err)
	require.Equal(t, want, res.KL)
	require.Equal(t, float32(0.1)*want, res.Loss)

	// Accumulate adds onto what is there.
	g1 := tensor.Must(tensor.NewLike(lp, tensor.Float32))
	_, err = KLLoss(Grad{Dst: g1}, lp, ref, mask, KLConfig{Kind: divergence.LowVarKL, Coef: 0.1})
	require.NoError(t, err)
	g2 := tensor.Must(tensor.NewLike(lp, tensor.Float32))
	v2, _ := g2.Float32s()
	for j := range v2 {
		v2[j] = 2
	}
	_, err = KLLoss(Grad{Dst: g2, Accumulate: true}, lp, ref, mask, KLConfig{Kind: divergence.LowVarKL, Coef: 0.1})
	require.NoError(t, err)
	v1, _ := g1.Float32s()
	for j := range v1 {
		require.InDelta(t, 2+v1[j], v2[j], 1e-7)
	}
}

func TestKLLossBadInputs(t *testing.T) {
	lp := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	ref := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	m := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	wrong := tensor.Must(tensor.FromFloat32(make([]float32, 6), 3, 2))
	const op = "ppo.KLLoss"
	_, err := KLLoss(Grad{}, lp, ref, m, KLConfig{Kind: divergence.Kind(42)})
	require.ErrorIs(t, err, tensor.ErrParam)
	_, err = KLLoss(Grad{}, lp, ref, m, KLConfig{Coef: math.NaN()})
	wantErr(t, err, tensor.ErrParam, op, "Coef")
	_, err = KLLoss(Grad{}, lp, wrong, m, KLConfig{})
	wantErr(t, err, tensor.ErrShape, op, "ref")
	_, err = KLLoss(Grad{}, lp, ref, wrong, KLConfig{})
	wantErr(t, err, tensor.ErrShape, op, "logp")
	_, err = KLLoss(Grad{Dst: wrong}, lp, ref, m, KLConfig{})
	wantErr(t, err, tensor.ErrShape, op, "grad.Dst")
	_, err = KLLoss(Grad{Scale: -1}, lp, ref, m, KLConfig{})
	wantErr(t, err, tensor.ErrParam, op, "grad.Scale")
	_, err = KLLoss(Grad{}, nil, ref, m, KLConfig{})
	wantErr(t, err, tensor.ErrShape, op, "logp")
	_, err = KLLoss(Grad{}, lp, ref, m, KLConfig{Kind: divergence.Full})
	wantErr(t, err, tensor.ErrShape, op, "logp")
	_, err = KLLoss(Grad{}, lp, ref, m, KLConfig{Agg: Agg{Mode: SeqMeanTokenSumNorm}})
	wantErr(t, err, tensor.ErrParam, op, "Horizon")
}

func TestEntropyPenalty(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	b := randBatch(rng, 4, 6, 0.5, false)
	g := make([]float64, len(b.lp))
	cfg, opt := EntropyConfig{Coef: 0.3}, Grad{Scale: 2}
	l := entropyHost(g, b.lp, b.m, cfg, opt)
	var s, n float64
	for j := range b.m {
		s += b.lp[j] * b.m[j]
		n += b.m[j]
	}
	require.InDelta(t, 2*0.3*-(s/(n+1e-8)), l, 1e-12)
	gradcheck.Check(t, "entropy", func(x []float64) float64 { return entropyHost(nil, x, b.m, cfg, opt) }, slices.Clone(b.lp), g, 1e-6, 1e-6, 1e-10)

	lp, m := ten(b.lp, 4, 6), ten(b.m, 4, 6)
	got, err := EntropyPenalty(Grad{}, lp, m, EntropyConfig{Coef: 0.3})
	require.NoError(t, err)
	require.InDelta(t, 0.3*-(s/n), got, 1e-6)
	grad := tensor.Must(tensor.NewLike(lp, tensor.Float32))
	_, err = EntropyPenalty(Grad{Dst: grad, Scale: 2}, lp, m, cfg)
	require.NoError(t, err)
	gv, _ := grad.Float32s()
	for j := range gv {
		require.InDelta(t, g[j], gv[j], 1e-7)
	}

	_, err = EntropyPenalty(Grad{}, lp, m, EntropyConfig{Coef: math.Inf(1)})
	wantErr(t, err, tensor.ErrParam, "ppo.EntropyPenalty", "Coef")
	_, err = EntropyPenalty(Grad{}, lp, nil, EntropyConfig{})
	wantErr(t, err, tensor.ErrShape, "ppo.EntropyPenalty", "mask")
	_, err = EntropyPenalty(Grad{Dst: tensor.Must(tensor.FromFloat32(make([]float32, 24), 6, 4))}, lp, m, EntropyConfig{})
	wantErr(t, err, tensor.ErrShape, "ppo.EntropyPenalty", "grad.Dst")
	_, err = EntropyPenalty(Grad{Scale: math.NaN()}, lp, m, EntropyConfig{})
	wantErr(t, err, tensor.ErrParam, "ppo.EntropyPenalty", "grad.Scale")
}

func TestTokenScale(t *testing.T) {
	m := tensor.Must(tensor.FromFloat32([]float32{1, 1, 0, 1, 0, 0}, 2, 3))
	f, err := TokenScale(m, 12, 2)
	require.NoError(t, err)
	require.Equal(t, 3.0*2/12, f)
	_, err = TokenScale(m, 0, 1)
	wantErr(t, err, tensor.ErrParam, "ppo.TokenScale", "globalTokens")
	_, err = TokenScale(m, 10, 0)
	wantErr(t, err, tensor.ErrParam, "ppo.TokenScale", "worldSize")
	_, err = TokenScale(nil, 10, 1)
	wantErr(t, err, tensor.ErrShape, "ppo.TokenScale", "microMask")

	// Summing scaled micro-batch token-mean losses gives the mini-batch token mean.
	rng := rand.New(rand.NewPCG(47, 48))
	b := randBatch(rng, 6, 5, 0.5, false)
	whole, err := PolicyLoss(Grad{}, b.inputs(), fill(PolicyConfig{}))
	require.NoError(t, err)
	var total float64
	for _, w := range b.m {
		total += w
	}
	var sum float64
	for lo := 0; lo < 6; lo += 2 {
		mb := batch{B: 2, T: 5, old: b.old[lo*5 : lo*5+10], lp: b.lp[lo*5 : lo*5+10], adv: b.adv[lo*5 : lo*5+10], m: b.m[lo*5 : lo*5+10]}
		in := mb.inputs()
		s, err := TokenScale(in.ResponseMask, total, 1)
		require.NoError(t, err)
		r, err := PolicyLoss(Grad{Scale: s}, in, fill(PolicyConfig{}))
		require.NoError(t, err)
		sum += float64(r.Loss)
	}
	require.InDelta(t, whole.PGLoss, sum, 1e-6)
}
