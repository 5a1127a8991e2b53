package ppo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
)

type valueBatch struct {
	B, T            int
	vp, ret, val, m []float64
}

func randValueBatch(rng *rand.Rand, B, T int, c float64) valueBatch {
	b := valueBatch{B: B, T: T, m: randMask(rng, B, T)}
	n := B * T
	b.vp, b.ret, b.val = make([]float64, n), make([]float64, n), make([]float64, n)
	for j := range n {
		for {
			b.val[j] = rng.NormFloat64()
			b.ret[j] = rng.NormFloat64()
			b.vp[j] = b.val[j] + 2*c*(2*rng.Float64()-1) + 0.3*rng.NormFloat64()
			// Stay away from the clamp bounds and from l1 == l2 (kinks).
			lo, hi := b.val[j]-c, b.val[j]+c
			vc := min(max(b.vp[j], lo), hi)
			l1, l2 := (b.vp[j]-b.ret[j])*(b.vp[j]-b.ret[j]), (vc-b.ret[j])*(vc-b.ret[j])
			if math.Abs(b.vp[j]-lo) > 1e-4 && math.Abs(b.vp[j]-hi) > 1e-4 && (l1 == l2 || math.Abs(l1-l2) > 1e-4) {
				break
			}
		}
	}
	return b
}

func (b valueBatch) inputs() ValueInputs {
	return ValueInputs{VPreds: ten(b.vp, b.B, b.T), Returns: ten(b.ret, b.B, b.T), Values: ten(b.val, b.B, b.T), ResponseMask: ten(b.m, b.B, b.T)}
}

func TestValueLossGradFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, c := range []float64{0.5, 0.2, 10} {
		for _, agg := range allAggs {
			b := randValueBatch(rng, 4, 9, c)
			cfg := ValueConfig{ClipRange: c, Agg: agg}
			g := make([]float64, len(b.vp))
			valueHost(g, b.vp, b.ret, b.val, b.m, b.B, b.T, cfg, Grad{})
			f := func(x []float64) float64 {
				_, l := valueHost(nil, x, b.ret, b.val, b.m, b.B, b.T, cfg, Grad{})
				return l
			}
			gradcheck.Check(t, fmt.Sprintf("c=%v/%v", c, agg.Mode), f, slices.Clone(b.vp), g, 1e-6, 1e-5, 1e-9)
			for j := range g {
				if b.m[j] == 0 && g[j] != 0 {
					t.Fatalf("masked token %d has gradient %v", j, g[j])
				}
			}
		}
	}
}

func TestValueLossTieSplitsGradient(t *testing.T) {
	// c = 0 and vpreds mirrored around returns: l1 == l2 while the clipped branch has zero
	// gradient, so torch's max gives half the unclipped gradient.
	vp := []float32{1.5}
	in := ValueInputs{
		VPreds: tensor.Must(tensor.FromFloat32(vp, 1, 1)), Returns: tensor.Must(tensor.FromFloat32([]float32{1}, 1, 1)),
		Values: tensor.Must(tensor.FromFloat32([]float32{0.5}, 1, 1)), ResponseMask: tensor.Must(tensor.FromFloat32([]float32{1}, 1, 1)),
	}
	g := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
	res, err := ValueLoss(Grad{Dst: g}, in, ValueConfig{})
	require.NoError(t, err)
	require.InDelta(t, 0.125, res.VFLoss, 1e-7)
	gv, _ := g.Float32s()
	require.InDelta(t, 0.25, gv[0], 1e-7) // 0.5 * (2*0.5 + 0) / 2
	require.Zero(t, res.VFClipFrac)
}

func TestValueLossPropertiesAndOptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	b := randValueBatch(rng, 5, 12, 0.5)
	for j := range b.m {
		if b.m[j] == 0 {
			b.vp[j] = math.NaN()
		}
	}
	in := b.inputs()
	g := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
	res, err := ValueLoss(Grad{Dst: g}, in, ValueConfig{ClipRange: 0.5})
	require.NoError(t, err)
	require.False(t, math.IsNaN(float64(res.VFLoss)))
	require.Equal(t, res.VFLoss, res.Loss)
	gv, _ := g.Float32s()
	for j := range gv {
		if b.m[j] == 0 {
			require.Zero(t, gv[j])
		}
	}
	fwd, err := ValueLoss(Grad{}, in, ValueConfig{ClipRange: 0.5})
	require.NoError(t, err)
	require.Equal(t, res, fwd)
	require.Equal(t, map[string]float64{"vf_clipfrac": res.VFClipFrac, "vpred_mean": res.VPredMean}, res.Metrics())

	acc := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
	av, _ := acc.Float32s()
	for j := range av {
		av[j] = -1
	}
	res2, err := ValueLoss(Grad{Dst: acc, Scale: 3, Accumulate: true}, in, ValueConfig{ClipRange: 0.5})
	require.NoError(t, err)
	require.InDelta(t, 3*res.VFLoss, res2.Loss, 1e-6)
	for j := range av {
		require.InDelta(t, -1+3*gv[j], av[j], 1e-6)
	}
}

func TestValueLossBadInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	good := randValueBatch(rng, 2, 3, 0.5).inputs()
	wrong := tensor.Must(tensor.FromFloat32(make([]float32, 8), 4, 2))
	ints := tensor.Must(tensor.FromInt32(make([]int32, 6), 2, 3))
	with := func(f func(*ValueInputs)) ValueInputs { in := good; f(&in); return in }
	const op = "ppo.ValueLoss"
	for _, c := range []struct {
		name     string
		grad     Grad
		in       ValueInputs
		cfg      ValueConfig
		sentinel error
		arg      string
	}{
		{"negative clip", Grad{}, good, ValueConfig{ClipRange: -0.1}, tensor.ErrParam, "ClipRange"},
		{"NaN clip", Grad{}, good, ValueConfig{ClipRange: math.NaN()}, tensor.ErrParam, "ClipRange"},
		{"horizon", Grad{}, good, ValueConfig{Agg: Agg{Mode: SeqMeanTokenSumNorm}}, tensor.ErrParam, "Horizon"},
		{"scale", Grad{Scale: math.NaN()}, good, ValueConfig{}, tensor.ErrParam, "grad.Scale"},
		{"nil vpreds", Grad{}, with(func(in *ValueInputs) { in.VPreds = nil }), ValueConfig{}, tensor.ErrShape, "VPreds"},
		{"returns shape", Grad{}, with(func(in *ValueInputs) { in.Returns = wrong }), ValueConfig{}, tensor.ErrShape, "Returns"},
		{"values dtype", Grad{}, with(func(in *ValueInputs) { in.Values = ints }), ValueConfig{}, tensor.ErrDType, "Values"},
		{"grad shape", Grad{Dst: wrong}, good, ValueConfig{}, tensor.ErrShape, "grad.Dst"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ValueLoss(c.grad, c.in, c.cfg)
			wantErr(t, err, c.sentinel, op, c.arg)
		})
	}
	bad := with(func(in *ValueInputs) {
		v := []float32{1, 2, float32(math.Inf(1)), 4, 5, 6}
		in.Returns = tensor.Must(tensor.FromFloat32(v, 2, 3))
	})
	_, err := ValueLoss(Grad{}, bad, ValueConfig{CheckFinite: true})
	wantErr(t, err, tensor.ErrNotFinite, op, "Returns")
}

func BenchmarkValueLoss(b *testing.B) {
	rng := rand.New(rand.NewPCG(37, 38))
	B, T := 64, 1024
	vb := randValueBatch(rng, B, T, 0.2)
	for j := range vb.m {
		vb.m[j] = 1
	}
	in := vb.inputs()
	grad := tensor.Must(tensor.NewLike(in.VPreds, tensor.Float32))
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		b.SetBytes(int64(B * T * 4 * 5))
		for b.Loop() {
			if _, err := ValueLoss(Grad{Dst: grad}, in, ValueConfig{ClipRange: 0.2}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}
