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

// padWidth is the padded length of a micro-batch: its longest prompt plus t response columns.
func padWidth(prompts [][]int32, t int) int {
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	return longest + t
}

// padSeqs right-pads every sequence to width tokens with the padding id (width 0: none).
func (m *Model) padSeqs(seqs [][]int32, width int) error {
	if width <= 0 {
		return nil
	}
	pad := m.padID()
	for i, s := range seqs {
		if len(s) > width {
			return tensor.Errorf(tensor.ErrShape, "hflm.Model.Score", "tokens", "sequence %d has %d tokens, more than the padded width %d", i, len(s), width)
		}
		for len(s) < width {
			s = append(s, pad)
		}
		seqs[i] = s
	}
	return nil
}

// padID is the config's pad_token_id, else 0 (any id serves: nothing reads the padding's
// outputs).
func (m *Model) padID() int32 {
	if p := m.Config.PadTokenID; p != nil && *p >= 0 && *p < m.Config.VocabSize {
		return int32(*p)
	}
	return 0
}

// RowTokens implements loop.TokenCounter: the row's prompt and completion tokens (at most b.T
// of them), which a padding-free pass computes and loop.Config.MicroBatchTokens budgets.
func (p *Policy[P]) RowTokens(b *loop.Batch[P], row int) int {
	return len(p.Prompt(b.Prompts[row])) + min(len(b.Completions[row].Tokens), b.T)
}
