package tprl

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// RandomKey seeds RandomMask: row i of a [B, T] mask draws from the stream (Seed, Step,
// FirstRow+i), so a row's selection depends only on the run's seed, the step and the row's
// index in the step's batch — not on how the batch is split into mini-, micro-batches or ranks,
// and not on the PPO epoch.
type RandomKey struct {
	Seed     uint64
	Step     int // >= 0
	FirstRow int // >= 0: the index of the tensors' first row in the step's batch
}

// rows returns the key of the rows that start lo rows further.
func (k RandomKey) rows(lo int) RandomKey { k.FirstRow += lo; return k }

// RandomMask writes into dst [B, T] the random-token mask, the control of the perception mask:
// per row the same number of valid tokens, tensor.TopPCount(n_i, p), as PerceptionMask keeps
// for that p, but chosen uniformly at random among the row's n_i positions with mask != 0 (so
// dst ⊆ mask). It separates "training on fewer tokens" from "training on the right ones". The
// draw of row i is seeded by key (see RandomKey). mask and dst are float32 [B, T] on one backend
// (a device stages the per-row random order through host memory and selects with
// tensor.TopPMask there); p lies in [0, 1]. The statistics carry actor/random_token_fraction.
func RandomMask(dst, mask *tensor.Tensor, p float32, key RandomKey) (SelectionStats, error) {
	const op = "tprl.RandomMask"
	if err := checkSelect(op, "mask", dst, mask, mask, p); err != nil {
		return SelectionStats{}, err
	}
	if key.Step < 0 || key.FirstRow < 0 {
		return SelectionStats{}, tensor.Errorf(tensor.ErrParam, op, "key", "step %d and first row %d must be >= 0", key.Step, key.FirstRow)
	}
	// Each row's random order of positions as scores: TopPMask keeps the k valid positions with
	// the largest ones, a uniform k-subset of the valid positions, and no two scores tie.
	scores, err := key.order(mask, randomStream)
	if err != nil {
		return SelectionStats{}, err
	}
	defer scores.Release()
	if err := tensor.TopPMask(dst, scores, mask, p); err != nil {
		return SelectionStats{}, err
	}
	selected, valid, err := tensor.MaskedSum(dst, mask)
	if err != nil {
		return SelectionStats{}, err
	}
	nan := meanOrNaN(0, 0) // a random selection has no values to average
	return SelectionStats{Filter: RandomFilter, Valid: int(valid), Selected: int(selected), SelectedMean: nan, RejectedMean: nan}, nil
}

// The streams RandomKey.order draws from: the random filter's selection and the tie order of
// the entropy and perception masks are independent draws of the same key.
const (
	randomStream = 0x72616e646f6d // "random"
	tiesStream   = 0x74696573     // "ties"
)

// order returns, on mask's backend, a float32 [B, T] tensor whose row i is a uniformly random
// permutation of 0..T-1 drawn from the stream (Seed^stream, Step, FirstRow+i). The caller
// releases it.
func (k RandomKey) order(mask *tensor.Tensor, stream uint64) (*tensor.Tensor, error) {
	rows, cols := mask.Dim(0), mask.Dim(1)
	order := make([]float32, rows*cols)
	for i := range rows {
		r := rand.New(rand.NewPCG(k.Seed^stream, uint64(k.Step)<<32|uint64(k.FirstRow+i)))
		for j, v := range r.Perm(cols) {
			order[i*cols+j] = float32(v)
		}
	}
	scores := tensor.Must(tensor.FromFloat32(order, rows, cols))
	if mask.IsHost() {
		return scores, nil
	}
	return tensor.To(mask.Backend(), scores)
}
