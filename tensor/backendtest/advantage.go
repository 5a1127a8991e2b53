package backendtest

import (
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/tensor"
)

// advantageOps: GAE, REINFORCE++ and ReMax on dense or sparse rewards, and the group estimators
// (GRPO, pass@k, RLOO) on groups of two or more rows that are not contiguous.
func advantageOps(rows, cols int) []op {
	r := rand.New(rand.NewPCG(uint64(rows)+300, uint64(cols)))
	n := rows * cols
	m := paddedMask(r, rows, cols)
	vals, dense := Randn(r, n, 1), Randn(r, n, 1)
	sparse := make([]float32, n) // one outcome reward per row
	for i := range rows {
		sparse[i*cols+r.IntN(cols)] = float32(r.IntN(3))
	}
	baselines := Randn(r, rows, 1)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32((i * 7919) % max(1, rows/2))
	}
	if rows%2 == 1 && rows > 2 {
		ids[rows-1] = ids[0]
	}
	// est runs one estimator into fresh advantages and returns on be.
	est := func(name string, f func(t *testing.T, be tensor.Backend, adv, ret, mask *tensor.Tensor) error) op {
		return op{name, 1e-5, 1e-5, false, func(t *testing.T, be tensor.Backend) [][]float32 {
			adv, ret := newF32(be, rows, cols), newF32(be, rows, cols)
			if err := f(t, be, adv, ret, Upload(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{Host(t, adv), Host(t, ret)}
		}}
	}
	ops := []op{
		est("GAE", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, dense, rows, cols), Values: Upload(t, be, vals, rows, cols), ResponseMask: mk}, advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: 0.99, Lambda: 0.95})
		}),
		est("ReinforcePlusPlus", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, dense, rows, cols), ResponseMask: mk}, advantage.Config{Estimator: advantage.EstimatorReinforcePlusPlus, Gamma: 0.99})
		}),
		est("ReMax", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, sparse, rows, cols), ResponseMask: mk, Baselines: Upload(t, be, baselines, rows)}, advantage.Config{Estimator: advantage.EstimatorReMax})
		}),
	}
	if rows < 2 {
		return ops
	}
	return append(ops,
		est("GRPO", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorGRPO})
		}),
		est("GRPOPassK", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorGRPOPassK})
		}),
		est("RLOO", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorRLOO})
		}),
	)
}
