package ppo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
)

func TestParseAggModeRoundTrip(t *testing.T) {
	for m := Token; m <= SeqMeanTokenSumNorm; m++ {
		got, err := ParseAggMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	for s, want := range map[string]AggMode{"token-mean": Token, "seq-mean-token-mean": Seq} {
		got, err := ParseAggMode(s)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, s := range []string{"", "Token", "mean", "seq-mean"} {
		_, err := ParseAggMode(s)
		wantErr(t, err, tensor.ErrParam, "ppo.ParseAggMode", "s")
	}
	require.Equal(t, "AggMode(7)", AggMode(7).String())
}

func TestAverageLossModes(t *testing.T) {
	v := tensor.Must(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	m := tensor.Must(tensor.FromFloat32([]float32{1, 1, 0, 1, 0, 0}, 2, 3))
	for _, c := range []struct {
		agg  Agg
		want float64
	}{
		{Agg{Mode: Token}, 7.0 / 3},
		{Agg{Mode: Seq}, (1.5 + 4) / 2},
		{Agg{Mode: SeqMeanTokenSum}, (3.0 + 4) / 2},
		{Agg{Mode: SeqMeanTokenSumNorm, Horizon: 4}, 7.0 / 4},
	} {
		got, err := c.agg.Loss(v, m)
		require.NoError(t, err)
		require.InDelta(t, c.want, got, 1e-6, c.agg.Mode.String())
		g := tensor.Must(tensor.NewLike(v, tensor.Float32))
		got2, err := c.agg.LossGrad(g, v, m)
		require.NoError(t, err)
		require.Equal(t, got, got2)
	}
	// Empty batch: 0 in every mode.
	e := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 0, 3))
	for _, a := range allAggs {
		got, err := a.Loss(e, e)
		require.NoError(t, err)
		require.Zero(t, got)
	}
}

func TestAverageLossGradFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	B, T := 4, 7
	m := randMask(rng, B, T)
	m[2] = 0.5 // a fractional weight
	v := make([]float64, B*T)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	for _, agg := range allAggs {
		g := make([]float64, B*T)
		averageLossHost(g, v, m, B, T, agg)
		f := func(x []float64) float64 { return averageLossHost(nil, x, m, B, T, agg) }
		gradcheck.Check(t, agg.Mode.String(), f, v, g, 1e-6, 1e-6, 1e-9)
		for i := range m {
			if m[i] == 0 && g[i] != 0 {
				t.Fatalf("%v: masked position %d has gradient %v", agg.Mode, i, g[i])
			}
		}
	}
}

func TestAverageLossBadInputs(t *testing.T) {
	v := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	m23 := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	m32 := tensor.Must(tensor.FromFloat32(make([]float32, 6), 3, 2))
	r1 := tensor.Must(tensor.FromFloat32(make([]float32, 6), 6))
	i32 := tensor.Must(tensor.FromInt32(make([]int32, 6), 2, 3))
	_, err := Agg{Mode: Token}.Loss(v, m32)
	wantErr(t, err, tensor.ErrShape, "ppo.Agg.Loss", "mask")
	_, err = Agg{Mode: Token}.Loss(r1, r1)
	wantErr(t, err, tensor.ErrShape, "ppo.Agg.Loss", "values")
	_, err = Agg{Mode: Token}.Loss(v, nil)
	wantErr(t, err, tensor.ErrShape, "ppo.Agg.Loss", "mask")
	_, err = Agg{Mode: Token}.Loss(v, i32)
	wantErr(t, err, tensor.ErrDType, "ppo.Agg.Loss", "mask")
	_, err = Agg{Mode: AggMode(9)}.Loss(v, m23)
	wantErr(t, err, tensor.ErrParam, "ppo.Agg.Loss", "mode")
	_, err = Agg{Mode: SeqMeanTokenSumNorm}.Loss(v, m23)
	wantErr(t, err, tensor.ErrParam, "ppo.Agg.Loss", "Horizon")
	_, err = Agg{Mode: Token}.LossGrad(nil, v, m23)
	wantErr(t, err, tensor.ErrShape, "ppo.Agg.LossGrad", "dst")
	_, err = Agg{Mode: Token}.LossGrad(m32, v, m23)
	wantErr(t, err, tensor.ErrShape, "ppo.Agg.LossGrad", "dst")
	_, err = Agg{Eps: -1}.Loss(v, m23)
	wantErr(t, err, tensor.ErrParam, "ppo.Agg.Loss", "Eps")
	_, err = Agg{Eps: math.NaN()}.LossGrad(m23, v, m23)
	wantErr(t, err, tensor.ErrParam, "ppo.Agg.LossGrad", "Eps")
	wantErr(t, Agg{Mode: SeqMeanTokenSumNorm, Horizon: -3}.Validate(), tensor.ErrParam, "ppo.Agg.Validate", "Horizon")
	require.NoError(t, Agg{}.Validate())
}

func BenchmarkAverageLoss(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	B, T := 64, 1024
	v := make([]float32, B*T)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	vt := tensor.Must(tensor.FromFloat32(v, B, T))
	mt := ten(randMask(rng, B, T), B, T)
	g := tensor.Must(tensor.NewLike(vt, tensor.Float32))
	for _, mode := range []AggMode{Token, Seq} {
		b.Run("cpu/mode="+mode.String()+"/shape=64x1024", func(b *testing.B) {
			b.SetBytes(int64(B * T * 12))
			for b.Loop() {
				if _, err := (Agg{Mode: mode}).LossGrad(g, vt, mt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
