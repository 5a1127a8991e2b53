package divergence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestPenalizeRewards: the penalty is subtracted on each response's tokens only, and the
// divergence is the mean over rows of each row's token mean (a row without tokens counts 0).
func TestPenalizeRewards(t *testing.T) {
	f := func(v ...float32) *tensor.Tensor { return tensor.Must(tensor.FromFloat32(v, 3, 2)) }
	rewards := f(0, 1, 0, 2, 5, 5)
	logp := f(-1, -2, -1, -1, -3, -3)
	ref := f(-1.5, -1, -2, -1, -1, -1)
	mask := f(1, 1, 1, 0, 0, 0)
	kl, err := divergence.PenalizeRewards(divergence.PenalizedRewards{Rewards: rewards, LogProbs: logp, RefLogProbs: ref,
		ResponseMask: mask, Lengths: []int{2, 1, 0}, Kind: divergence.KL, Coef: 0.5})
	require.NoError(t, err)
	// kl = logp - ref: row 0 (0.5, -1), row 1 (1), row 2 none.
	assert.InDelta(t, ((0.5-1)/2+1+0)/3, kl, 1e-12)
	got, _ := rewards.Float32s()
	assert.Equal(t, []float32{0 - 0.25, 1 + 0.5, 0 - 0.5, 2, 5, 5}, got)

	_, err = divergence.PenalizeRewards(divergence.PenalizedRewards{Rewards: rewards, LogProbs: logp, RefLogProbs: ref,
		ResponseMask: mask, Lengths: []int{2, 1}, Kind: divergence.KL})
	assert.ErrorIs(t, err, tensor.ErrShape)
	_, err = divergence.PenalizeRewards(divergence.PenalizedRewards{Rewards: rewards, LogProbs: logp, RefLogProbs: ref,
		ResponseMask: mask, Lengths: []int{2, 1, 0}, Kind: divergence.Full})
	assert.ErrorIs(t, err, tensor.ErrParam)
}
