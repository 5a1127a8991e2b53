//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/tensor"
)

var (
	_ advantage.GAEKernel               = deviceKernels{}
	_ advantage.GroupKernel             = deviceKernels{}
	_ advantage.ReinforcePlusPlusKernel = deviceKernels{}
	_ advantage.ReMaxKernel             = deviceKernels{}
)

// GAE is the device kernel of advantage.Compute with EstimatorGAE: the reverse recurrence one thread per row, then the
// batch-wide masked whitening of masked.cu in place.
func (b deviceKernels) GAE(adv, returns, rewards, values, mask *tensor.Tensor, gamma, lam float64) error {
	const op = "advantage.Compute"
	rows, cols := rewards.Dim(0), rewards.Dim(1)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"adv", "returns", "rewards", "values", "mask"}, adv, returns, rewards, values, mask)
		if err != nil {
			return err
		}
		if err := b.launch(op, "advantage_gae_fwd_f32", ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]), intArg(rows), intArg(cols),
			f32Arg(float32(gamma)), f32Arg(float32(gamma*lam))); err != nil {
			return err
		}
		return b.whiten(op, p[0], p[0], p[4], rows*cols)
	})
}

// ReinforcePlusPlus is the device kernel of advantage.Compute with EstimatorReinforcePlusPlus.
func (b deviceKernels) ReinforcePlusPlus(adv, returns, rewards, mask *tensor.Tensor, gamma float64) error {
	const op = "advantage.Compute"
	rows, cols := rewards.Dim(0), rewards.Dim(1)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"adv", "returns", "rewards", "mask"}, adv, returns, rewards, mask)
		if err != nil {
			return err
		}
		if err := b.launch(op, "advantage_reinforce_fwd_f32", ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), intArg(rows), intArg(cols), f32Arg(float32(gamma))); err != nil {
			return err
		}
		return b.whiten(op, p[0], p[0], p[3], rows*cols)
	})
}

// ReMax is the device kernel of advantage.Compute with EstimatorReMax.
func (b deviceKernels) ReMax(adv, returns, rewards, mask, baselines *tensor.Tensor) error {
	const op = "advantage.Compute"
	rows, cols := rewards.Dim(0), rewards.Dim(1)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"adv", "returns", "rewards", "mask", "baselines"}, adv, returns, rewards, mask, baselines)
		if err != nil {
			return err
		}
		a, err := b.scratchPtr(op, 4*int64(rows))
		if err != nil {
			return err
		}
		if err := b.launch(op, "advantage_scores_fwd_f32", rows, 1, blockSize, 0, ptrArg(a), ptrArg(p[2]), intArg(cols)); err != nil {
			return err
		}
		if err := b.launch(op, "advantage_remax_fwd_f32", ceilDiv(rows, blockSize), 1, blockSize, 0, ptrArg(a), ptrArg(p[4]), intArg(rows)); err != nil {
			return err
		}
		n := rows * cols
		if err := b.elementwise(op, "advantage_broadcast_fwd_f32", n, ptrArg(p[0]), ptrArg(0), ptrArg(a), ptrArg(p[3]), intArg(n), intArg(cols)); err != nil {
			return err
		}
		if returns == nil {
			return nil
		}
		return b.launch(op, "advantage_remax_ret_fwd_f32", ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), intArg(rows), intArg(cols))
	})
}

// GroupAdvantage is the device kernel of the group estimators (GRPO, GRPO pass@k, RLOO): the row scores are
// float64 block sums on the device; the group statistics (a few numbers per row) are computed on
// the host from the downloaded scores and ids by advantage.GroupRowAdvantages, the pure-Go
// kernel's own code, and the per-row advantages are broadcast back under the mask on the device.
func (b deviceKernels) GroupAdvantage(adv, returns, rewards, mask, index *tensor.Tensor, est advantage.Estimator, opts advantage.GRPOOptions) error {
	const name = "advantage.Compute"
	rows, cols := rewards.Dim(0), rewards.Dim(1)
	return b.do(name, func() error {
		p, err := b.ptrs(name, []string{"adv", "returns", "rewards", "mask", "index"}, adv, returns, rewards, mask, index)
		if err != nil {
			return err
		}
		sp, err := b.scratchPtr(name, 4*int64(rows))
		if err != nil {
			return err
		}
		if err := b.launch(name, "advantage_scores_fwd_f32", rows, 1, blockSize, 0, ptrArg(sp), ptrArg(p[2]), intArg(cols)); err != nil {
			return err
		}
		scores := make([]float32, rows)
		ids := make([]int32, rows)
		if err := b.download(name, unsafe.Pointer(&scores[0]), sp, 4*rows); err != nil {
			return err
		}
		if err := b.download(name, unsafe.Pointer(&ids[0]), p[4], 4*rows); err != nil {
			return err
		}
		a, err := advantage.GroupRowAdvantages(scores, ids, est, opts)
		if err != nil {
			return err
		}
		if err := b.upload(name, sp, unsafe.Pointer(&a[0]), 4*rows); err != nil {
			return err
		}
		n := rows * cols
		return b.elementwise(name, "advantage_broadcast_fwd_f32", n, ptrArg(p[0]), ptrArg(p[1]), ptrArg(sp), ptrArg(p[3]), intArg(n), intArg(cols))
	})
}
