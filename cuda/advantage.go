//go:build cuda

package cuda

import (
	"math"
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

// GAE is the device kernel of advantage.GAE: the reverse recurrence one thread per row, then the
// batch-wide masked whitening of masked.cu in place.
func (b deviceKernels) GAE(adv, returns, rewards, values, mask *tensor.Tensor, gamma, lam float64) error {
	const op = "advantage.GAE"
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

// ReinforcePlusPlus is the device kernel of advantage.ReinforcePlusPlus.
func (b deviceKernels) ReinforcePlusPlus(adv, returns, rewards, mask *tensor.Tensor, gamma float64) error {
	const op = "advantage.ReinforcePlusPlus"
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

// ReMax is the device kernel of advantage.ReMax.
func (b deviceKernels) ReMax(adv, returns, rewards, mask, baselines *tensor.Tensor) error {
	const op = "advantage.ReMax"
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

// GroupAdvantage is the device kernel of advantage.GRPO, GRPOPassK and RLOO: the row scores are
// float64 block sums on the device; the group statistics (a few numbers per row) are computed on
// the host from the downloaded scores and ids, exactly as the pure-Go kernel does, and the per-row
// advantages are broadcast back under the mask on the device.
func (b deviceKernels) GroupAdvantage(adv, returns, rewards, mask, index *tensor.Tensor, est advantage.Estimator, opts advantage.GRPOOptions) error {
	name := groupOp(est)
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
		a, err := groupStats(name, scores, ids, est, opts)
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

func groupOp(est advantage.Estimator) string {
	switch est {
	case advantage.EstimatorGRPOPassK:
		return "advantage.GRPOPassK"
	case advantage.EstimatorRLOO:
		return "advantage.RLOO"
	}
	return "advantage.GRPO"
}

// groupStats is the group part of advantage's groupHost on the row scores: it returns the
// per-row advantage before the mask.
func groupStats(op string, scores []float32, ids []int32, est advantage.Estimator, opts advantage.GRPOOptions) ([]float32, error) {
	rows := len(ids)
	slot := make([]int, rows)
	slotOf := make(map[int32]int, rows)
	var size, first []int
	for i, id := range ids {
		s, ok := slotOf[id]
		if !ok {
			s = len(size)
			slotOf[id] = s
			size = append(size, 0)
			first = append(first, i)
		}
		slot[i] = s
		size[s]++
	}
	for s, n := range size {
		if n < 2 {
			return nil, tensor.Errorf(tensor.ErrParam, op, "index",
				"group %d has a single response (row %d); %s needs at least 2 responses per group", ids[first[s]], first[s], est)
		}
	}
	groups := len(size)
	a := make([]float32, rows)
	if est == advantage.EstimatorRLOO {
		sum := make([]float64, groups)
		for i, x := range scores {
			sum[slot[i]] += float64(x)
		}
		for i, x := range scores {
			n := size[slot[i]]
			baseline := (float32(sum[slot[i]]) - x) / float32(n-1)
			a[i] = x - baseline
		}
		return a, nil
	}
	mean64 := make([]float64, groups)
	for i, x := range scores {
		mean64[slot[i]] += float64(x)
	}
	for s := range mean64 {
		mean64[s] /= float64(size[s])
	}
	ss := make([]float64, groups)
	for i, x := range scores {
		d := float64(x) - mean64[slot[i]]
		ss[slot[i]] += d * d
	}
	eps := float32(advantage.DefaultEps)
	if opts.Eps != 0 {
		eps = float32(opts.Eps)
	}
	floor := float32(opts.StdFloor)
	denom := make([]float32, groups)
	for s := range denom {
		std := float32(math.Sqrt(ss[s] / float64(size[s]-1)))
		if std < floor {
			std = floor
		}
		denom[s] = std + eps
	}
	if est == advantage.EstimatorGRPO {
		for i, x := range scores {
			d := x - float32(mean64[slot[i]])
			if !opts.NoStdNorm {
				d /= denom[slot[i]]
			}
			a[i] = d
		}
		return a, nil
	}
	best := make([]int, groups)
	runnerUp := make([]int, groups)
	for s := range best {
		best[s], runnerUp[s] = -1, -1
	}
	for i, x := range scores {
		if s := slot[i]; best[s] < 0 || greater(x, scores[best[s]]) {
			best[s] = i
		}
	}
	for i, x := range scores {
		s := slot[i]
		if i != best[s] && (runnerUp[s] < 0 || greater(x, scores[runnerUp[s]])) {
			runnerUp[s] = i
		}
	}
	for s, i := range best {
		d := scores[i] - scores[runnerUp[s]]
		if !opts.NoStdNorm {
			d /= denom[s]
		}
		a[i] = d
	}
	return a, nil
}

// greater orders float32 values with NaN above everything (torch.topk's order).
func greater(x, y float32) bool {
	if x != x {
		return y == y
	}
	return x > y
}
