package loop_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor/collective"
	"github.com/mtrl-go/mtrl/tprl/loop"
	"github.com/stretchr/testify/require"
)

// TestDeviceAdamW: three steps of DeviceAdamW over CPU tensors (clipping active on two of them,
// a parameter without decay) follow torch.optim.AdamW after clip_grad_norm_, computed here in
// float64 from the same float32 gradients, within 1e-6 of (1 + |w|); Stepped runs after each
// step taken; a non-finite gradient skips the step (weights, moments and count unchanged,
// Stepped not called); the gradients are zero after every step.
func TestDeviceAdamW(t *testing.T) {
	const lr, wd, maxNorm, b1, b2, eps = 1e-2, 0.1, 2.0, 0.9, 0.999, 1e-8
	ps := dpParams(t, 3)
	var w, m, v [][]float64 // the reference
	for _, p := range ps {
		x, err := p.Value.Float32s()
		require.NoError(t, err)
		wi := make([]float64, len(x))
		for j := range x {
			wi[j] = float64(x[j])
		}
		w, m, v = append(w, wi), append(m, make([]float64, len(x))), append(v, make([]float64, len(x)))
	}
	o, err := loop.NewDeviceAdamW(ps, b1, b2, eps, wd)
	require.NoError(t, err)
	stepped := 0
	o.Stepped = func() error { stepped++; return nil }
	rng := rand.New(rand.NewPCG(4, 5))
	for step := 1; step <= 3; step++ {
		var gs [][]float64
		var ss float64
		for _, p := range ps {
			g, err := p.Grad.Float32s()
			require.NoError(t, err)
			gi := make([]float64, len(g))
			for j := range g {
				g[j] = float32(rng.NormFloat64() * float64(step))
				gi[j] = float64(g[j])
				ss += gi[j] * gi[j]
			}
			gs = append(gs, gi)
		}
		norm, err := o.Step(lr, maxNorm)
		require.NoError(t, err)
		require.InDelta(t, math.Sqrt(ss), norm, 1e-9*norm, "step %d norm", step)
		c := math.Min(1, maxNorm/(math.Sqrt(ss)+1e-6))
		for i, p := range ps {
			decay := 0.0
			if p.Decay {
				decay = wd
			}
			got, err := p.Value.Float32s()
			require.NoError(t, err)
			grad, err := p.Grad.Float32s()
			require.NoError(t, err)
			for j := range w[i] {
				g := gs[i][j] * c
				w[i][j] *= 1 - lr*decay
				m[i][j] = b1*m[i][j] + (1-b1)*g
				v[i][j] = b2*v[i][j] + (1-b2)*g*g
				mh, vh := m[i][j]/(1-math.Pow(b1, float64(step))), v[i][j]/(1-math.Pow(b2, float64(step)))
				w[i][j] -= lr * mh / (math.Sqrt(vh) + eps)
				require.InDelta(t, w[i][j], float64(got[j]), 1e-6*(1+math.Abs(w[i][j])), "step %d %s[%d]", step, p.Name, j)
				require.InDelta(t, m[i][j], float64(o.M[i][j]), 1e-6*(1+math.Abs(m[i][j])), "step %d m %s[%d]", step, p.Name, j)
				require.Zero(t, grad[j])
			}
		}
		require.Equal(t, step, o.Steps())
		require.Equal(t, step, stepped)
	}
	before := flatOf(t, values, ps)
	g, err := ps[1].Grad.Float32s()
	require.NoError(t, err)
	g[2] = float32(math.Inf(1))
	norm, err := o.Step(lr, maxNorm)
	require.NoError(t, err)
	require.True(t, math.IsInf(norm, 1))
	require.Equal(t, before, flatOf(t, values, ps), "a skipped step changes no weight")
	require.Equal(t, 3, o.Steps())
	require.Equal(t, 3, stepped)
	for _, x := range flatOf(t, grads, ps) {
		require.Zero(t, x)
	}
}

// TestDeviceGradients: Reduce scales the sum in place on one rank and refuses several.
func TestDeviceGradients(t *testing.T) {
	ps := dpParams(t, 1)
	addGrad(t, ps, microGrads(1, 0)[0], 1)
	want := flatOf(t, grads, ps)
	for j := range want {
		want[j] *= 0.5
	}
	g := &loop.DeviceGradients{Params: ps}
	require.NoError(t, g.Collect())
	_, err := g.Reduce(context.Background(), nil, 0.5)
	require.NoError(t, err)
	require.Equal(t, want, flatOf(t, grads, ps))
	err = collective.Run(context.Background(), 2, func(ctx context.Context, comm collective.Comm) error {
		_, err := g.Reduce(ctx, comm, 1)
		require.ErrorContains(t, err, "DeviceReduce")
		return nil
	})
	require.NoError(t, err)
	_, err = loop.NewDeviceAdamW(nil, 0.9, 0.999, 1e-8, 0)
	require.Error(t, err)
	_, err = loop.NewDeviceAdamW([]loop.Param{{Name: "w", Value: ps[0].Value}}, 0.9, 0.999, 1e-8, 0)
	require.ErrorContains(t, err, "parameter w")
}
