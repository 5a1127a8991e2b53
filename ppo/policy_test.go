package ppo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/gradcheck"
	"github.com/mtrl-go/mtrl/tensor"
)

func TestParseLossTypeRoundTrip(t *testing.T) {
	for _, l := range allLossTypes {
		got, err := ParseLossType(l.String())
		require.NoError(t, err)
		require.Equal(t, l, got)
	}
	got, err := ParseLossType("vanilla")
	require.NoError(t, err)
	require.Equal(t, Vanilla, got)
	for _, s := range []string{"", "ppo", "GSPO", "gspo-token"} {
		_, err := ParseLossType(s)
		wantErr(t, err, tensor.ErrParam, "ppo.ParseLossType", "s")
	}
	require.Equal(t, "LossType(-1)", LossType(-1).String())
}

func TestPolicyConfigDefaults(t *testing.T) {
	c := DefaultPolicyConfig(SAPO)
	require.Equal(t, PolicyConfig{LossType: SAPO, ClipLow: 0.2, ClipHigh: 0.3, ClipDual: 3, TauPos: 1, TauNeg: 1.05}, c)
	require.NoError(t, c.Validate())
	// The zero value is not silently the defaults: it is an error that points to them.
	err := PolicyConfig{}.Validate()
	wantErr(t, err, tensor.ErrParam, "ppo.PolicyConfig.Validate", "ClipDual")
	require.Contains(t, err.Error(), "DefaultPolicyConfig")
	// Every field means what it says: clips of 0 are valid (and the ratio is then pinned at 1).
	c.ClipLow, c.ClipHigh = 0, 0
	require.NoError(t, c.Validate())
	require.NoError(t, PolicyConfig{ClipLow: 1, ClipHigh: math.Inf(1), ClipDual: math.Inf(1), TauPos: 1, TauNeg: 1}.Validate())
}

// policyGradCase checks the analytic gradient of one config on one random batch against central
// differences of the float64 kernel.
func policyGradCase(t *testing.T, name string, b batch, cfg PolicyConfig) {
	t.Helper()
	cfg = fill(cfg)
	n := b.B * b.T
	g := make([]float64, n)
	policyHost(g, b.old, b.lp, b.adv, b.m, b.ltm, b.B, b.T, cfg, Grad{})
	old := b.old
	fcfg := cfg
	if cfg.LossType == GSPOToken {
		// The sequence ratio is detached: d lir[i,t] / d lp[i,t] = 1 with seq frozen. That is
		// the default loss with old' = lp0 - seq0, as a function of lp.
		seq := b.seqRatios()
		old = slices.Clone(b.old)
		for j := range old {
			old[j] = b.lp[j] - seq[j/b.T]
		}
		fcfg.LossType = Vanilla
	}
	x := slices.Clone(b.lp)
	f := func(x []float64) float64 {
		_, l := policyHost(nil, old, x, b.adv, b.m, b.ltm, b.B, b.T, fcfg, Grad{})
		return l
	}
	gradcheck.Check(t, name, f, x, g, 1e-6, 1e-5, 1e-9)
	for j := range n {
		if b.m[j] == 0 && g[j] != 0 {
			t.Fatalf("%s: masked token %d has gradient %v", name, j, g[j])
		}
		if b.ltm != nil && b.ltm[j] == 0 && g[j] != 0 && cfg.LossType != GSPO {
			t.Fatalf("%s: token-masked token %d has gradient %v", name, j, g[j])
		}
	}
}

func TestPolicyLossGradFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, lt := range allLossTypes {
		for _, agg := range allAggs {
			for _, ltm := range []bool{false, true} {
				for trial := range 3 {
					spread := []float64{0.15, 0.6, 1.6}[trial] // inside the clip, around it, dual clip
					cfg := fill(PolicyConfig{LossType: lt, ClipLow: 0.2, ClipHigh: 0.28, Agg: agg})
					if lt == SAPO {
						cfg.TauPos, cfg.TauNeg = 0.7, 1.6
					}
					var b batch
					for {
						b = randBatch(rng, 4, 9, spread, ltm)
						if lt == CISPO && trial >= 1 {
							// CISPO's clipped ratio is detached; finite differences see it only
							// where it is constant, i.e. outside the clip range.
							for j := range b.lp {
								if d := b.lp[j] - b.old[j]; math.Abs(d) < 0.35 {
									b.lp[j] = b.old[j] + math.Copysign(0.35+d*d, d)
								}
							}
						}
						if lt == CISPO && trial == 0 {
							break // inside the clip: checked in closed form below
						}
						if !nearKink(b, cfg, 1e-4) {
							break
						}
					}
					if lt == CISPO && trial == 0 {
						continue
					}
					policyGradCase(t, fmt.Sprintf("%v/%v/ltm=%v/spread=%v", lt, agg.Mode, ltm, spread), b, cfg)
				}
			}
		}
	}
}

func TestPolicyLossCISPOInsideClipClosedForm(t *testing.T) {
	// Inside the clip range clipped == ratio, but it is detached: grad = -A * ratio * w * m.
	rng := rand.New(rand.NewPCG(7, 8))
	b := randBatch(rng, 3, 8, 0.1, false)
	cfg := fill(PolicyConfig{LossType: CISPO})
	g := make([]float64, len(b.lp))
	policyHost(g, b.old, b.lp, b.adv, b.m, nil, b.B, b.T, cfg, Grad{})
	var S float64
	for _, w := range b.m {
		S += w
	}
	for j := range g {
		want := -b.adv[j] * math.Exp(b.lp[j]-b.old[j]) * b.m[j] / (S + 1e-8)
		require.InDelta(t, want, g[j], 1e-12)
	}
}

func TestPolicyLossGSPOBroadcastPerRow(t *testing.T) {
	// Rows with different sequence ratios: row i's tokens must use seq_i
	// (docs/semantics.md#gspo-sequence-ratio-broadcast).
	B, T := 2, 3
	old := []float32{-1, -1, -1, -1, -1, -1}
	lp := []float32{-0.9, -0.9, -0.9, -1.5, -1.5, -1.5}
	adv := []float32{1, 1, 1, 1, 1, 1}
	m := []float32{1, 1, 1, 1, 1, 1}
	in := PolicyInputs{ten(f64s(old), B, T), ten(f64s(lp), B, T), ten(f64s(adv), B, T), ten(f64s(m), B, T), nil}
	in.OldLogProbs, in.LogProbs = tensor.Must(tensor.FromFloat32(old, B, T)), tensor.Must(tensor.FromFloat32(lp, B, T))
	res, err := PolicyLoss(Grad{}, in, fill(PolicyConfig{LossType: GSPO, ClipHigh: 0.28}))
	require.NoError(t, err)
	// row 0: seq = 0.1, ratio 1.105 inside [0.8, 1.28] -> T = -1.105; row 1: seq = -0.5, ratio
	// 0.607, clipped 0.8 -> T = max(-0.607, -0.8) = -0.607.
	want := (3*-math.Exp(0.1) + 3*-math.Exp(-0.5)) / 6
	require.InDelta(t, want, res.PGLoss, 2e-6)
}

func TestPolicyLossProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, lt := range allLossTypes {
		for _, agg := range allAggs {
			b := randBatch(rng, 5, 11, 1.0, true)
			// Non-finite garbage under the response mask must not leak anywhere.
			for j := range b.m {
				if b.m[j] == 0 {
					b.lp[j], b.old[j], b.adv[j] = math.NaN(), math.Inf(1), math.Inf(-1)
				}
			}
			in := b.inputs()
			cfg := fill(PolicyConfig{LossType: lt, Agg: agg})
			grad := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
			before := [][]float32{}
			for _, x := range []*tensor.Tensor{in.OldLogProbs, in.LogProbs, in.Advantages, in.ResponseMask, in.TokenMask} {
				v, _ := x.Float32s()
				before = append(before, slices.Clone(v))
			}
			res, err := PolicyLoss(Grad{Dst: grad}, in, cfg)
			require.NoError(t, err)
			require.False(t, math.IsNaN(float64(res.PGLoss)), "%v/%v: NaN loss from masked garbage", lt, agg.Mode)
			g, _ := grad.Float32s()
			for j := range g {
				if b.m[j] == 0 && g[j] != 0 {
					t.Fatalf("%v/%v: masked token %d gradient %v", lt, agg.Mode, j, g[j])
				}
				if b.ltm[j] == 0 && g[j] != 0 && lt != GSPO {
					t.Fatalf("%v/%v: token-masked token %d gradient %v", lt, agg.Mode, j, g[j])
				}
			}
			// Inputs untouched; forward-only agrees.
			for i, x := range []*tensor.Tensor{in.OldLogProbs, in.LogProbs, in.Advantages, in.ResponseMask, in.TokenMask} {
				v, _ := x.Float32s()
				require.True(t, slices.EqualFunc(before[i], v, func(a, b float32) bool { return a == b || (a != a && b != b) }))
			}
			fwd, err := PolicyLoss(Grad{}, in, cfg)
			require.NoError(t, err)
			require.Equal(t, res, fwd)
			// An all-zero token mask gives zero loss and gradient.
			zero := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
			in.TokenMask = zero
			res, err = PolicyLoss(Grad{Dst: grad}, in, cfg)
			require.NoError(t, err)
			require.Zero(t, res.PGLoss)
			for _, x := range g {
				require.Zero(t, x)
			}
		}
	}
}

func TestPolicyLossRatioOneConstantAdvantage(t *testing.T) {
	// ratio = 1 everywhere and A = a: every clipped objective gives -a in token mode.
	for _, a := range []float32{1.5, -0.75, 0} {
		for _, lt := range []LossType{Vanilla, GSPO, GSPOToken} {
			B, T := 3, 5
			lp := make([]float32, B*T)
			adv := make([]float32, B*T)
			m := make([]float32, B*T)
			for j := range lp {
				lp[j] = -0.5 - float32(j)/10
				adv[j] = a
				if j%T < 3+j/T {
					m[j] = 1
				}
			}
			in := PolicyInputs{
				OldLogProbs: tensor.Must(tensor.FromFloat32(lp, B, T)), LogProbs: tensor.Must(tensor.FromFloat32(lp, B, T)),
				Advantages: tensor.Must(tensor.FromFloat32(adv, B, T)), ResponseMask: tensor.Must(tensor.FromFloat32(m, B, T)),
			}
			res, err := PolicyLoss(Grad{}, in, fill(PolicyConfig{LossType: lt}))
			require.NoError(t, err)
			require.InDelta(t, -a, res.PGLoss, 1e-6, "%v a=%v", lt, a)
			require.Zero(t, res.PPOKL)
			require.Zero(t, res.ClipFracHigher)
			require.Zero(t, res.ClipFracLower)
		}
	}
}

func TestPolicyLossScaleAndAccumulate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b := randBatch(rng, 3, 10, 0.8, true)
	in := b.inputs()
	plain := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
	res, err := PolicyLoss(Grad{Dst: plain}, in, fill(PolicyConfig{}))
	require.NoError(t, err)
	require.Equal(t, res.PGLoss, res.Loss)
	acc := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
	av, _ := acc.Float32s()
	for j := range av {
		av[j] = 1
	}
	res2, err := PolicyLoss(Grad{Dst: acc, Scale: 0.25, Accumulate: true}, in, fill(PolicyConfig{}))
	require.NoError(t, err)
	require.Equal(t, res.PGLoss, res2.PGLoss)
	require.InDelta(t, 0.25*res.PGLoss, res2.Loss, 1e-7)
	pv, _ := plain.Float32s()
	for j := range pv {
		require.InDelta(t, 1+0.25*pv[j], av[j], 1e-6)
	}
}

func TestPolicyLossDeterministicAcrossProcs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	b := randBatch(rng, 64, 700, 1.2, true)
	in := b.inputs()
	run := func(procs int) (PolicyResult, []float32) {
		prev := runtime.GOMAXPROCS(procs)
		defer runtime.GOMAXPROCS(prev)
		g := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
		res, err := PolicyLoss(Grad{Dst: g}, in, fill(PolicyConfig{LossType: GSPO, Agg: Agg{Mode: Seq}}))
		require.NoError(t, err)
		v, _ := g.Float32s()
		return res, v
	}
	r1, g1 := run(1)
	r4, g4 := run(4)
	require.Equal(t, r1, r4)
	require.Equal(t, g1, g4)
}

func TestPolicyLossMetricsKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	in := randBatch(rng, 2, 4, 0.5, false).inputs()
	for _, lt := range allLossTypes {
		res, err := PolicyLoss(Grad{}, in, fill(PolicyConfig{LossType: lt}))
		require.NoError(t, err)
		keys := []string{}
		for k := range res.Metrics() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"entropy_loss", "pg_clipfrac_higher", "pg_clipfrac_lower", "ppo_kl"}
		if lt == CISPO || lt == SAPO {
			want = []string{"entropy_loss", "ppo_kl"}
		}
		require.Equal(t, want, keys, lt.String())
	}
}

func TestPolicyLossNaNAdvantage(t *testing.T) {
	// Documented: a NaN advantage at a valid token propagates into the loss; CheckFinite
	// rejects it instead.
	rng := rand.New(rand.NewPCG(17, 18))
	b := randBatch(rng, 2, 4, 0.3, false)
	b.m[0], b.adv[0] = 1, math.NaN()
	in := b.inputs()
	res, err := PolicyLoss(Grad{}, in, fill(PolicyConfig{}))
	require.NoError(t, err)
	require.True(t, math.IsNaN(float64(res.PGLoss)))
	_, err = PolicyLoss(Grad{}, in, fill(PolicyConfig{CheckFinite: true}))
	wantErr(t, err, tensor.ErrNotFinite, "ppo.PolicyLoss", "Advantages")
}

func TestPolicyLossBadInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	good := randBatch(rng, 2, 3, 0.3, true).inputs()
	wrong := tensor.Must(tensor.FromFloat32(make([]float32, 8), 2, 4))
	rank1 := tensor.Must(tensor.FromFloat32(make([]float32, 6), 6))
	ints := tensor.Must(tensor.FromInt32(make([]int32, 6), 2, 3))
	with := func(f func(*PolicyInputs)) PolicyInputs { in := good; f(&in); return in }
	const op = "ppo.PolicyLoss"
	for _, c := range []struct {
		name     string
		grad     Grad
		in       PolicyInputs
		cfg      PolicyConfig
		sentinel error
		arg      string
	}{
		{"unknown loss type", Grad{}, good, fill(PolicyConfig{LossType: 42}), tensor.ErrParam, "LossType"},
		{"clip dual one", Grad{}, good, fill(PolicyConfig{ClipDual: 1}), tensor.ErrParam, "ClipDual"},
		{"clip dual below one", Grad{}, good, fill(PolicyConfig{ClipDual: 0.5}), tensor.ErrParam, "ClipDual"},
		{"clip dual NaN", Grad{}, good, fill(PolicyConfig{ClipDual: math.NaN()}), tensor.ErrParam, "ClipDual"},
		{"clip low above one", Grad{}, good, fill(PolicyConfig{ClipLow: 1.5}), tensor.ErrParam, "ClipLow"},
		{"clip low negative", Grad{}, good, fill(PolicyConfig{ClipLow: -0.1}), tensor.ErrParam, "ClipLow"},
		{"clip high negative", Grad{}, good, fill(PolicyConfig{ClipHigh: -0.1}), tensor.ErrParam, "ClipHigh"},
		{"tau pos negative", Grad{}, good, fill(PolicyConfig{LossType: SAPO, TauPos: -1}), tensor.ErrParam, "TauPos"},
		{"tau neg NaN", Grad{}, good, fill(PolicyConfig{LossType: SAPO, TauNeg: math.NaN()}), tensor.ErrParam, "TauNeg"},
		{"tau neg inf", Grad{}, good, fill(PolicyConfig{TauNeg: math.Inf(1)}), tensor.ErrParam, "TauNeg"},
		{"agg mode", Grad{}, good, fill(PolicyConfig{Agg: Agg{Mode: 17}}), tensor.ErrParam, "Agg.Mode"},
		{"horizon", Grad{}, good, fill(PolicyConfig{Agg: Agg{Mode: SeqMeanTokenSumNorm}}), tensor.ErrParam, "Agg.Horizon"},
		{"scale", Grad{Scale: -1}, good, fill(PolicyConfig{}), tensor.ErrParam, "grad.Scale"},
		{"scale inf", Grad{Scale: math.Inf(1)}, good, fill(PolicyConfig{}), tensor.ErrParam, "grad.Scale"},
		{"nil logprobs", Grad{}, with(func(in *PolicyInputs) { in.LogProbs = nil }), fill(PolicyConfig{}), tensor.ErrShape, "LogProbs"},
		{"nil mask", Grad{}, with(func(in *PolicyInputs) { in.ResponseMask = nil }), fill(PolicyConfig{}), tensor.ErrShape, "ResponseMask"},
		{"rank 1", Grad{}, with(func(in *PolicyInputs) { in.LogProbs = rank1 }), fill(PolicyConfig{}), tensor.ErrShape, "LogProbs"},
		{"advantages shape", Grad{}, with(func(in *PolicyInputs) { in.Advantages = wrong }), fill(PolicyConfig{}), tensor.ErrShape, "Advantages"},
		{"old shape", Grad{}, with(func(in *PolicyInputs) { in.OldLogProbs = wrong }), fill(PolicyConfig{}), tensor.ErrShape, "OldLogProbs"},
		{"token mask shape", Grad{}, with(func(in *PolicyInputs) { in.TokenMask = wrong }), fill(PolicyConfig{}), tensor.ErrShape, "TokenMask"},
		{"grad shape", Grad{Dst: wrong}, good, fill(PolicyConfig{}), tensor.ErrShape, "grad.Dst"},
		{"mask dtype", Grad{}, with(func(in *PolicyInputs) { in.ResponseMask = ints }), fill(PolicyConfig{}), tensor.ErrDType, "ResponseMask"},
		{"grad dtype", Grad{Dst: ints}, good, fill(PolicyConfig{}), tensor.ErrDType, "grad.Dst"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := PolicyLoss(c.grad, c.in, c.cfg)
			wantErr(t, err, c.sentinel, op, c.arg)
		})
	}
	wantErr(t, PolicyConfig{ClipDual: 0.9}.Validate(), tensor.ErrParam, "ppo.PolicyConfig.Validate", "ClipDual")
}

func FuzzPolicyLoss(f *testing.F) {
	f.Add(uint8(2), uint8(3), uint8(0), uint8(0), uint64(1), false)
	f.Add(uint8(1), uint8(1), uint8(1), uint8(1), uint64(2), true)
	f.Add(uint8(0), uint8(5), uint8(2), uint8(2), uint64(3), true)
	f.Add(uint8(7), uint8(0), uint8(3), uint8(3), uint64(4), false)
	f.Add(uint8(5), uint8(9), uint8(4), uint8(0), uint64(5), true)
	f.Fuzz(func(t *testing.T, B, T, lt, mode uint8, seed uint64, withLTM bool) {
		rows, cols := int(B%9), int(T%17)
		rng := rand.New(rand.NewPCG(seed, 99))
		b := batch{B: rows, T: cols}
		n := rows * cols
		pick := func() float64 {
			switch rng.IntN(12) {
			case 0:
				return math.NaN()
			case 1:
				return math.Inf(1 - 2*rng.IntN(2))
			case 2:
				return 40 * (2*rng.Float64() - 1)
			}
			return 3 * (2*rng.Float64() - 1)
		}
		b.old, b.lp, b.adv, b.m = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for j := range n {
			b.old[j], b.lp[j], b.adv[j] = pick(), pick(), pick()
			b.m[j] = float64(rng.IntN(2))
		}
		if withLTM {
			b.ltm = make([]float64, n)
			for j := range n {
				b.ltm[j] = float64(rng.IntN(2))
			}
		}
		in := b.inputs()
		if n == 0 {
			in.OldLogProbs = tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols))
			in.LogProbs = tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols))
			in.Advantages = tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols))
			in.ResponseMask = tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols))
			in.TokenMask = nil
		}
		cfg := fill(PolicyConfig{LossType: LossType(lt % 5), Agg: allAggs[mode%4]})
		grad := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
		res, err := PolicyLoss(Grad{Dst: grad}, in, cfg)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := grad.Float32s()
		for j := range g {
			if b.m[j] == 0 && g[j] != 0 {
				t.Fatalf("masked token %d has gradient %v", j, g[j])
			}
		}
		if n == 0 && res.PGLoss != 0 {
			t.Fatalf("empty batch loss %v", res.PGLoss)
		}
	})
}

// benchBatch is a [B, T] batch: realistic (advantage constant per row as in GRPO, log ratios
// ~N(0, 0.1), so a few percent of tokens clip) or adversarial (per-token random advantage signs
// and log ratios in [-0.5, 0.5], which defeats branch prediction).
func benchBatch(B, T int, adversarial bool) batch {
	rng := rand.New(rand.NewPCG(21, 22))
	bt := randBatch(rng, B, T, 0.5, false)
	for j := range bt.m {
		bt.m[j] = 1
	}
	if !adversarial {
		for i := range B {
			a := rng.NormFloat64()
			for t := range T {
				j := i*T + t
				bt.adv[j] = a
				bt.lp[j] = bt.old[j] + 0.1*rng.NormFloat64()
			}
		}
	}
	return bt
}

func benchPolicy(b *testing.B, lt LossType, B, T int, adversarial bool) {
	in := benchBatch(B, T, adversarial).inputs()
	grad := tensor.Must(tensor.NewLike(in.LogProbs, tensor.Float32))
	cfg := fill(PolicyConfig{LossType: lt, ClipHigh: 0.28})
	b.SetBytes(int64(B * T * 4 * 5)) // four inputs read, one gradient written
	for b.Loop() {
		if _, err := PolicyLoss(Grad{Dst: grad}, in, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkPolicyLoss(b *testing.B) {
	for _, lt := range allLossTypes {
		b.Run("cpu/type="+lt.String()+"/shape=64x1024", func(b *testing.B) { benchPolicy(b, lt, 64, 1024, false) })
	}
	b.Run("cpu/type=default/shape=64x1024/data=adversarial", func(b *testing.B) { benchPolicy(b, Vanilla, 64, 1024, true) })
	// The Default loss per implementation of its per-token kernel (impl=avx512|avx2|go).
	for _, name := range policyImpls.Names() {
		for _, sh := range [][2]int{{64, 1024}, {512, 2048}} {
			b.Run(fmt.Sprintf("cpu/type=default/impl=%s/shape=%dx%d", name, sh[0], sh[1]), func(b *testing.B) {
				defer policyImpls.Use(name)()
				benchPolicy(b, Vanilla, sh[0], sh[1], false)
			})
		}
	}
}
