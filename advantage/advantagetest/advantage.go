package advantagetest

import (
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
)

// opsAt: GAE, REINFORCE++ and ReMax on dense or sparse rewards, and the group estimators
// (GRPO, pass@k, RLOO) on groups of two or more rows that are not contiguous.
func opsAt(rows, cols int) []backendtest.Op {
	r := rand.New(rand.NewPCG(uint64(rows)+300, uint64(cols)))
	n := rows * cols
	m := backendtest.PaddedMask(r, rows, cols)
	vals, dense := backendtest.Randn(r, n, 1), backendtest.Randn(r, n, 1)
	sparse := make([]float32, n) // one outcome reward per row
	for i := range rows {
		sparse[i*cols+r.IntN(cols)] = float32(r.IntN(3))
	}
	baselines := backendtest.Randn(r, rows, 1)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32((i * 7919) % max(1, rows/2))
	}
	if rows%2 == 1 && rows > 2 {
		ids[rows-1] = ids[0]
	}
	// est runs one estimator into fresh advantages and returns on be.
	est := func(name string, f func(t *testing.T, be tensor.Backend, adv, ret, mask *tensor.Tensor) error) backendtest.Op {
		return backendtest.Op{Name: name, RTol: 1e-5, ATol: 1e-5, Run: func(t *testing.T, be tensor.Backend) [][]float32 {
			adv, ret := backendtest.NewF32(be, rows, cols), backendtest.NewF32(be, rows, cols)
			if err := f(t, be, adv, ret, backendtest.Upload(t, be, m, rows, cols)); err != nil {
				t.Fatal(err)
			}
			return [][]float32{backendtest.Host(t, adv), backendtest.Host(t, ret)}
		}}
	}
	ops := []backendtest.Op{
		est("GAE", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, dense, rows, cols), Values: backendtest.Upload(t, be, vals, rows, cols), ResponseMask: mk}, advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: 0.99, Lambda: 0.95})
		}),
		est("ReinforcePlusPlus", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, dense, rows, cols), ResponseMask: mk}, advantage.Config{Estimator: advantage.EstimatorReinforcePlusPlus, Gamma: 0.99})
		}),
		est("ReMax", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, sparse, rows, cols), ResponseMask: mk, Baselines: backendtest.Upload(t, be, baselines, rows)}, advantage.Config{Estimator: advantage.EstimatorReMax})
		}),
	}
	if rows < 2 {
		return ops
	}
	return append(ops,
		est("GRPO", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: backendtest.UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorGRPO})
		}),
		est("GRPOPassK", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: backendtest.UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorGRPOPassK})
		}),
		est("RLOO", func(t *testing.T, be tensor.Backend, a, ret, mk *tensor.Tensor) error {
			return advantage.ComputeWithReturns(a, ret, advantage.Inputs{Rewards: backendtest.Upload(t, be, sparse, rows, cols), ResponseMask: mk, Index: backendtest.UploadInt32(t, be, ids, rows)}, advantage.Config{Estimator: advantage.EstimatorRLOO})
		}),
	)
}
