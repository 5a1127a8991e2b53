package hflm

import (
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// The model's passes are padding-free: a micro-batch's sequences are laid end to end (one row
// with cu_seqlens, FlashAttention's varlen layout), so no compute goes to padding. A padded
// batch, as trainers without remove_padding build it, is the same layout with every sequence
// right-padded to a common width: the causal attention never lets a real token see the padding
// after it, and the padding's rows receive exactly zero gradient, so the log-probs are the same
// bits and the parameter gradients differ only in how the float32 sums over tokens group into
// internal/gemm's blocks of 128 rows (the zeros of the padding shift the block boundaries).

// padSeqs right-pads every sequence to the longest prompt plus padT tokens with the padding id
// and returns how many positions of each row are scored (padT each; nil when padT is 0: no
// padding). Like a padded trainer's [B, T] response block, the padding's positions after a
// completion are scored too, with zero loss gradient.
func (m *Model) padSeqs(seqs, prompts, completions [][]int32, padT int) ([]int, error) {
	if padT <= 0 {
		return nil, nil
	}
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	width, pad := longest+padT, m.padID()
	cols := make([]int, len(seqs))
	for i, s := range seqs {
		if len(completions[i]) > padT {
			return nil, tensor.Errorf(tensor.ErrShape, "hflm.Model.Score", "completions", "completion %d has %d tokens, more than the %d padded columns", i, len(completions[i]), padT)
		}
		for len(s) < width {
			s = append(s, pad)
		}
		seqs[i], cols[i] = s, padT
	}
	return cols, nil
}

// padID is the config's pad_token_id, else 0 (any id serves: nothing reads the padding's
// outputs).
func (m *Model) padID() int32 {
	if p := m.Config.PadTokenID; p != nil && *p >= 0 && *p < m.Config.VocabSize {
		return int32(*p)
	}
	return 0
}

// scored is how many positions of row i the LM head scores.
func (s *Scores) scored(i int) int {
	if s.cols != nil {
		return s.cols[i]
	}
	return len(s.LogProbs[i])
}

// RowTokens implements loop.TokenCounter: the row's prompt and completion tokens (at most b.T
// of them), which a padding-free pass computes and loop.Config.MicroBatchTokens budgets.
func (p *Policy[P]) RowTokens(b *loop.Batch[P], row int) int {
	return len(p.Prompt(b.Prompts[row])) + min(len(b.Completions[row].Tokens), b.T)
}
