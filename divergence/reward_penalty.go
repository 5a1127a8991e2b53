package divergence

import (
	"math"

	"github.com/mtrl-go/mtrl/tensor"
)

// PenalizedRewards is the divergence in the reward (EasyR1's apply_kl_penalty): the token rewards
// of a batch minus Coef × Penalty(LogProbs, RefLogProbs) on each response's tokens.
type PenalizedRewards struct {
	// Rewards [B, T] are the token-level scores, penalised in place.
	Rewards *tensor.Tensor
	// LogProbs and RefLogProbs [B, T] are the rollout policy's and the reference's log-probs of
	// the sampled tokens.
	LogProbs, RefLogProbs *tensor.Tensor
	// ResponseMask [B, T] is 1 on each response's tokens; Lengths[i] is row i's count of them.
	// The mask must be the prefix mask of Lengths (1 on a row's first Lengths[i] columns), as a
	// rollout's response mask is: the lengths let the device path penalise the tokens without a
	// masked multiply.
	ResponseMask *tensor.Tensor
	Lengths      []int
	// Kind is the element-wise penalty (Full needs the whole distribution and is refused).
	Kind Kind
	// Coef is the controller's current coefficient.
	Coef float64
}

// PenalizeRewards subtracts Coef × Penalty(LogProbs, RefLogProbs) from the rewards on each
// response's tokens and returns the batch's divergence, the controller's current_kl: the mean over
// rows of each row's masked token mean (a row without tokens counts 0). The arithmetic is
// float32 per token (r -= coef·p) and float64 for the means; on a device only the B row means
// come down.
func PenalizeRewards(in PenalizedRewards) (float64, error) {
	const op = "divergence.PenalizeRewards"
	if in.Kind == Full {
		return 0, tensor.Errorf(tensor.ErrParam, op, "Kind", "%v needs the whole distribution [B, T, V]; the reward penalty is per sampled token (kl, abs, mse, low_var_kl)", in.Kind)
	}
	if math.IsNaN(in.Coef) || math.IsInf(in.Coef, 0) {
		return 0, tensor.Errorf(tensor.ErrParam, op, "Coef", "is %v, want a finite value", in.Coef)
	}
	names := []string{"Rewards", "LogProbs", "RefLogProbs", "ResponseMask"}
	ts := []*tensor.Tensor{in.Rewards, in.LogProbs, in.RefLogProbs, in.ResponseMask}
	for i, t := range ts {
		if err := tensor.CheckDType(op, names[i], t, tensor.Float32); err != nil {
			return 0, err
		}
		if err := tensor.CheckSameShape(op, "Rewards", in.Rewards, names[i], t); err != nil {
			return 0, err
		}
	}
	if err := tensor.CheckSameBackend(op, names, ts...); err != nil {
		return 0, err
	}
	if len(in.Rewards.Shape()) != 2 {
		return 0, tensor.Errorf(tensor.ErrShape, op, "Rewards", "has shape %v, want [B, T]", in.Rewards.Shape())
	}
	B, T := in.Rewards.Dim(0), in.Rewards.Dim(1)
	if len(in.Lengths) != B {
		return 0, tensor.Errorf(tensor.ErrShape, op, "Lengths", "has %d rows, want %d", len(in.Lengths), B)
	}
	for i, l := range in.Lengths {
		if l < 0 || l > T {
			return 0, tensor.Errorf(tensor.ErrParam, op, "Lengths", "row %d has %d tokens, want 0..%d", i, l, T)
		}
	}
	if in.Rewards.IsHost() {
		return penalizeHost(in, B, T)
	}
	return penalizeOnBackend(in, B, T)
}

// penalizeHost is PenalizeRewards on host tensors, element by element.
func penalizeHost(in PenalizedRewards, B, T int) (float64, error) {
	pen, err := tensor.NewLike(in.LogProbs, tensor.Float32)
	if err != nil {
		return 0, err
	}
	if err := Penalty(pen, in.LogProbs, in.RefLogProbs, in.Kind); err != nil {
		return 0, err
	}
	p, _ := pen.Float32s()
	r, _ := in.Rewards.Float32s()
	m, _ := in.ResponseMask.Float32s()
	coef := float32(in.Coef)
	var total float64
	for i := range B {
		var s, n float64
		for j := range T {
			if m[i*T+j] != 0 {
				r[i*T+j] -= coef * p[i*T+j]
				s += float64(p[i*T+j])
				n++
			}
		}
		if n > 0 {
			total += s / n
		}
	}
	return total / float64(B), nil
}

// penalizeOnBackend is PenalizeRewards with the tensors' backend's kernels: the reference's
// log-probs on each response's tokens and the policy's on the columns after them (the penalty
// of equal log-probs is 0 for every per-token kind), so the penalty is already 0 off the mask
// and the rewards there stay as they are.
func penalizeOnBackend(in PenalizedRewards, B, T int) (float64, error) {
	b := in.Rewards.Backend()
	var owned []*tensor.Tensor
	defer func() {
		for _, t := range owned {
			_ = t.Release()
		}
	}()
	alloc := func(shape ...int) (*tensor.Tensor, error) {
		t, err := tensor.New(b, tensor.Float32, shape...)
		if err == nil {
			owned = append(owned, t)
		}
		return t, err
	}
	refIn, err := alloc(B, T)
	if err != nil {
		return 0, err
	}
	if err := tensor.CopyInto(refIn, in.LogProbs); err != nil {
		return 0, err
	}
	flatRef, err := in.RefLogProbs.Reshape(B * T)
	if err != nil {
		return 0, err
	}
	flatIn, err := refIn.Reshape(B * T)
	if err != nil {
		return 0, err
	}
	for i, l := range in.Lengths {
		if l == 0 {
			continue
		}
		d, err := flatIn.Rows(i*T, i*T+l)
		if err != nil {
			return 0, err
		}
		s, err := flatRef.Rows(i*T, i*T+l)
		if err != nil {
			return 0, err
		}
		if err := tensor.CopyInto(d, s); err != nil {
			return 0, err
		}
	}
	pen, err := alloc(B, T)
	if err != nil {
		return 0, err
	}
	zero, err := alloc(B, T) // allocations are zeroed
	if err != nil {
		return 0, err
	}
	if err := Penalty(pen, in.LogProbs, refIn, in.Kind); err != nil {
		return 0, err
	}
	// rewards - (pen - 0)·coef: the host path's r -= coef·p, the same float32 operations.
	if err := Rewards(in.Rewards, in.Rewards, pen, zero, float32(in.Coef)); err != nil {
		return 0, err
	}
	rowMeans, err := alloc(B)
	if err != nil {
		return 0, err
	}
	if err := tensor.MaskedMeanRows(rowMeans, pen, in.ResponseMask); err != nil {
		return 0, err
	}
	h, err := tensor.To(tensor.CPU(), rowMeans)
	if err != nil {
		return 0, err
	}
	means, _ := h.Float32s()
	var total float64
	for i, l := range in.Lengths {
		if l > 0 {
			total += float64(means[i])
		}
	}
	return total / float64(B), nil
}
