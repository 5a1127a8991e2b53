package advantage

import (
	"math"

	"github.com/mtrl-go/mtrl/internal/parallel"
	"github.com/mtrl-go/mtrl/tensor"
)

// GroupKernel is implemented by backends that compute the group estimators (GRPO, GRPO pass@k,
// RLOO) on the device. Arguments are validated before the call except the group structure: the
// kernel must reject a group of one with an ErrParam naming "index". returns may be nil; opts is
// ignored by RLOO.
type GroupKernel interface {
	GroupAdvantage(adv, returns, rewards, mask, index *tensor.Tensor, est Estimator, opts GRPOOptions) error
}

// GRPO computes the GRPO outcome advantage (compute_grpo_outcome_advantage,
// docs/semantics.md#grpo).
//
// rewards and mask are float32 [B, T], index is int32 [B]: rows with equal ids form a group (any
// int32 values, in any order; groups need not be contiguous). With score_i = sum_t rewards[i,t]
// over all positions, padded ones included (as the reference), and the group's mean and
// unbiased (n-1) standard deviation of the scores:
//
//	adv[i,t] = (score_i - mean) / (std + eps) * mask[i,t]
//
// A group whose scores are all equal gets exactly 0 (the mean is computed exactly, never NaN).
// Every group needs at least two responses: a group of one is an ErrParam naming "index" and the
// group id. opts.StdFloor and opts.NoStdNorm are documented extensions; the zero GRPOOptions is the
// reference. returns, when not nil, receives a copy of adv (the reference returns the same
// tensor twice). Outputs must not alias the inputs. An empty batch [0, T] is valid and writes
// nothing.
//
// Numerics: the scores and the group statistics are accumulated in float64 and rounded to float32
// (torch reduces in float32 and float64 respectively; the difference is at most an ulp or two of
// the score), then (score - mean)/(std + fl32(eps)) is evaluated in float32. NaN and ±Inf
// rewards propagate to their group; a NaN advantage times a 0 mask stays NaN, as in torch.
func grpo(adv, returns, rewards, mask, index *tensor.Tensor, opts GRPOOptions) error {
	return groupAdvantage("advantage.GRPO", adv, returns, rewards, mask, index, EstimatorGRPO, opts)
}

// GRPOPassK computes the pass@k outcome advantage with upstream EasyR1's semantics
// (compute_grpo_passk_outcome_advantage, docs/semantics.md#grpo-passk): in each group only the
// arg-max row of the scores gets a non-zero advantage, (r_max - r_2nd)/(std + eps), where r_max and
// r_2nd are the group's two largest scores and std its unbiased standard deviation; every other row
// is 0. Ties at the maximum give r_max - r_2nd = 0, so the whole group is 0 (of tied rows the
// lowest index is the arg-max; the reference's choice is unspecified but irrelevant). NaN counts as
// the largest value, as in torch.topk. Inputs, outputs, options, group rules and numerics are those
// of GRPO.
//
// The VPPO fork instead leaves non-max rows at their raw score (a bug fixed upstream,
// docs/semantics.md#passk-in-place-write).
func grpoPassK(adv, returns, rewards, mask, index *tensor.Tensor, opts GRPOOptions) error {
	return groupAdvantage("advantage.GRPOPassK", adv, returns, rewards, mask, index, EstimatorGRPOPassK, opts)
}

// RLOO computes the leave-one-out advantage (compute_rloo_outcome_advantage,
// docs/semantics.md#rloo):
//
//	adv[i,t] = (score_i - (sum_group - score_i)/(n_group - 1)) * mask[i,t]
//
// with score_i the sum of row i's rewards over all positions. Inputs, outputs, group rules and
// numerics are those of GRPO (the group sum is accumulated in float64 and rounded to float32, the
// rest is float32 in the reference's order).
func rloo(adv, returns, rewards, mask, index *tensor.Tensor) error {
	return groupAdvantage("advantage.RLOO", adv, returns, rewards, mask, index, EstimatorRLOO, GRPOOptions{})
}

func groupAdvantage(op string, adv, returns, rewards, mask, index *tensor.Tensor, est Estimator, opts GRPOOptions) error {
	if err := checkTokens(op, adv, returns, rewards, mask); err != nil {
		return err
	}
	if err := checkRowVector(op, "index", index, rewards, tensor.Int32); err != nil {
		return err
	}
	if err := opts.validate(op); err != nil {
		return err
	}
	if rewards.Dim(0) == 0 {
		return nil
	}
	if k, ok := tensor.KernelOf[GroupKernel](rewards.Backend()); ok {
		return k.GroupAdvantage(adv, returns, rewards, mask, index, est, opts)
	}
	return tensor.OnHost(2, []*tensor.Tensor{adv, returns, rewards, mask, index}, func(h []*tensor.Tensor) error {
		ids, _ := h[4].Int32s()
		return groupHost(op, f32s(h[0]), f32s(h[1]), f32s(h[2]), f32s(h[3]), ids, rewards.Dim(1), est, opts)
	})
}

// groupHost is the pure-Go kernel of the group estimators on row-major [len(ids), cols] slices;
// ret may be nil.
func groupHost(op string, adv, ret, r, m []float32, ids []int32, cols int, est Estimator, opts GRPOOptions) error {
	rows := len(ids)
	a, err := groupRowAdvantages(op, rowScores(r, rows, cols), ids, est, opts)
	if err != nil {
		return err
	}
	parallel.For(rows, rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			base := i * cols
			ai, mi := adv[base:base+cols], m[base:base+cols]
			for t, w := range mi {
				ai[t] = a[i] * w
			}
			if ret != nil {
				copy(ret[base:base+cols], ai)
			}
		}
	})
	return nil
}

// GroupRowAdvantages returns the per-row advantage of a group estimator (EstimatorGRPO,
// EstimatorGRPOPassK or EstimatorRLOO) before the response mask is applied, from each row's
// summed reward (scores) and its group id (index): the host part of the computation, which the
// pure-Go kernel and a backend's GroupKernel share so they cannot drift. The caller broadcasts
// a[i] * mask[i, t]. A group of one is an ErrParam error naming index, and opts are validated
// as GRPOOptions documents.
func GroupRowAdvantages(scores []float32, index []int32, est Estimator, opts GRPOOptions) ([]float32, error) {
	const op = "advantage.GroupRowAdvantages"
	if len(scores) != len(index) {
		return nil, tensor.Errorf(tensor.ErrShape, op, "scores", "has %d rows, index %d", len(scores), len(index))
	}
	if est != EstimatorGRPO && est != EstimatorGRPOPassK && est != EstimatorRLOO {
		return nil, tensor.Errorf(tensor.ErrParam, op, "est", "%v is not a group estimator", est)
	}
	if err := opts.validate(op); err != nil {
		return nil, err
	}
	return groupRowAdvantages(groupOpName(est), scores, index, est, opts)
}

// groupOpName is the entry point of est, for error messages.
func groupOpName(est Estimator) string {
	switch est {
	case EstimatorGRPOPassK:
		return "advantage.GRPOPassK"
	case EstimatorRLOO:
		return "advantage.RLOO"
	}
	return "advantage.GRPO"
}

func groupRowAdvantages(op string, scores []float32, ids []int32, est Estimator, opts GRPOOptions) ([]float32, error) {
	rows := len(ids)
	// Group structure: slot[i] is row i's group, numbered by first appearance.
	slot := make([]int, rows)
	slotOf := make(map[int32]int, rows)
	var size []int
	var first []int
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
	switch est {
	case EstimatorRLOO:
		sum := make([]float64, groups)
		for i, x := range scores {
			sum[slot[i]] += float64(x)
		}
		for i, x := range scores {
			n := size[slot[i]]
			baseline := (float32(sum[slot[i]]) - x) / float32(n-1)
			a[i] = x - baseline
		}
	default:
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
		eps := opts.eps()
		floor := float32(opts.StdFloor)
		denom := make([]float32, groups)
		for s := range denom {
			std := float32(math.Sqrt(ss[s] / float64(size[s]-1)))
			if std < floor {
				std = floor
			}
			denom[s] = std + eps
		}
		if est == EstimatorGRPO {
			for i, x := range scores {
				d := x - float32(mean64[slot[i]])
				if !opts.NoStdNorm {
					d /= denom[slot[i]]
				}
				a[i] = d
			}
			break
		}
		// Pass@k: the arg-max (lowest index among ties; NaN is the largest value, as in
		// torch.topk) and the largest score among the other members.
		best := make([]int, groups)
		for s := range best {
			best[s] = -1
		}
		for i, x := range scores {
			if s := slot[i]; best[s] < 0 || greater(x, scores[best[s]]) {
				best[s] = i
			}
		}
		runnerUp := make([]int, groups)
		for s := range runnerUp {
			runnerUp[s] = -1
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

// rowScores returns sum_t r[i,t] over all positions of each row, accumulated in float64 and
// rounded to float32.
func rowScores(r []float32, rows, cols int) []float32 {
	scores := make([]float32, rows)
	parallel.For(rows, rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			scores[i] = rowSum(r[i*cols : (i+1)*cols])
		}
	})
	return scores
}

// rowSum sums a row in float64 (four independent accumulators, combined in a fixed order) and
// rounds to float32.
func rowSum(x []float32) float32 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return float32((s0 + s1) + (s2 + s3))
}
