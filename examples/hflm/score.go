package hflm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// Scores are the per-token log-probabilities and entropies of completions given their prompts,
// computed by the fused LM head (tensor.LMHeadLogProbs), which never builds the [tokens, V]
// logits.
type Scores struct {
	// LogProbs[i][t] is log p(completion i's token t | prompt i, its tokens before t) at the
	// temperature; Entropy[i][t] is the entropy of that distribution.
	LogProbs, Entropy [][]float32

	m       *Model
	a       *acts
	cols    []int          // positions scored per row when padded (nil: its completion's length)
	rows    []int          // packed row of each scored position (the hidden state that predicts it)
	rowIDs  *tensor.Tensor // rows as int32 on the model's backend
	lmIn    tensor.LMHeadInputs
	lp, ent *tensor.Tensor // [M]
}

// Score runs the model over prompt i followed by completion i for every i and scores the
// completions' tokens. With train the activations are kept for Backward.
func (m *Model) Score(prompts, completions [][]int32, temperature float32, train bool) (*Scores, error) {
	return m.score(prompts, completions, temperature, train, 0)
}

// score is Score, padded when padT > 0: every sequence right-padded to the longest prompt plus
// padT tokens and padT response positions scored per row (padding.go).
func (m *Model) score(prompts, completions [][]int32, temperature float32, train bool, padT int) (*Scores, error) {
	const op = "hflm.Model.Score"
	if len(prompts) != len(completions) {
		return nil, tensor.Errorf(tensor.ErrShape, op, "completions", "%d completions for %d prompts", len(completions), len(prompts))
	}
	seqs := make([][]int32, len(prompts))
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, tensor.Errorf(tensor.ErrShape, op, "prompts", "prompt %d is empty", i)
		}
		seqs[i] = append(append(make([]int32, 0, len(p)+len(completions[i])), p...), completions[i]...)
	}
	cols, err := m.padSeqs(seqs, prompts, completions, padT)
	if err != nil {
		return nil, err
	}
	promptLens, compLens := make([]int, len(prompts)), make([]int, len(prompts))
	for i, p := range prompts {
		promptLens[i], compLens[i] = len(p), len(completions[i])
	}
	return m.scoreInput(Input{Seqs: seqs}, promptLens, compLens, cols, temperature, train)
}

// ScoreInput is Score over an Input: the last completionLens[i] tokens of sequence i are the
// completion it scores (at least one token before them is the prompt).
func (m *Model) ScoreInput(inp Input, completionLens []int, temperature float32, train bool) (*Scores, error) {
	const op = "hflm.Model.ScoreInput"
	if len(completionLens) != len(inp.Seqs) {
		return nil, tensor.Errorf(tensor.ErrShape, op, "completionLens", "%d lengths for %d sequences", len(completionLens), len(inp.Seqs))
	}
	promptLens := make([]int, len(inp.Seqs))
	for i, c := range completionLens {
		if c < 0 || c >= len(inp.Seqs[i]) {
			return nil, tensor.Errorf(tensor.ErrShape, op, "completionLens", "sequence %d: %d completion tokens of %d leave no prompt", i, c, len(inp.Seqs[i]))
		}
		promptLens[i] = len(inp.Seqs[i]) - c
	}
	return m.scoreInput(inp, promptLens, completionLens, nil, temperature, train)
}

// scoreInput scores, in sequence i, the compLens[i] tokens after its first promptLens[i]
// (cols[i] positions when padded: the padding's too).
func (m *Model) scoreInput(inp Input, promptLens, compLens, cols []int, temperature float32, train bool) (*Scores, error) {
	in, err := m.packInput(inp)
	if err != nil {
		return nil, err
	}
	a, err := m.forward(in, train, nil)
	if err != nil {
		return nil, err
	}
	s := &Scores{m: m, LogProbs: make([][]float32, len(inp.Seqs)), Entropy: make([][]float32, len(inp.Seqs)), cols: cols}
	var targets []int32
	for i, c := range compLens {
		n, p := c, promptLens[i]
		if cols != nil {
			n = cols[i]
		}
		for t := range n { // completion i's tokens, then the padding's in the padded columns
			s.rows = append(s.rows, in.starts[i]+p-1+t)
		}
		targets = append(targets, inp.Seqs[i][p:p+n]...)
	}
	if train {
		s.a = a
	}
	mm := len(s.rows)
	if mm == 0 {
		for i := range inp.Seqs {
			s.LogProbs[i], s.Entropy[i] = []float32{}, []float32{}
		}
		return s, nil
	}
	// bfloat16 in bf16 mode; the backward does not read a.hidden.
	if s.rowIDs, err = m.ints(rowIDs(s.rows), mm); err != nil {
		return nil, err
	}
	hidden, err := m.gatherRows(a.hidden, s.rowIDs)
	if err != nil {
		return nil, err
	}
	a.hidden = nil
	tg, err := m.ints(targets, mm)
	if err != nil {
		return nil, err
	}
	var e errs
	s.lmIn = tensor.LMHeadInputs{Hidden: m.store(&e, hidden), Weight: m.head, Targets: tg, Temperature: temperature}
	s.lp, s.ent = m.alloc(&e, mm), m.alloc(&e, mm)
	e.do(tensor.LMHeadLogProbs(s.lp, s.ent, s.lmIn))
	if e.err != nil {
		return nil, e.err
	}
	// The scored positions' log-probs and entropies come to the host (a download on a device).
	lpv, err := tensor.HostFloat32s(s.lp)
	if err != nil {
		return nil, err
	}
	entv, err := tensor.HostFloat32s(s.ent)
	if err != nil {
		return nil, err
	}
	k := 0
	for i, c := range compLens {
		s.LogProbs[i], s.Entropy[i] = lpv[k:k+c:k+c], entv[k:k+c:k+c]
		k += s.scored(i)
	}
	return s, nil
}

// gatherRows copies rows of x [N, D] (the int32 row indices rows, on x's backend) into a new
// [len(rows), D] tensor: tensor.Embedding with x as the table.
func (m *Model) gatherRows(x, rows *tensor.Tensor) (*tensor.Tensor, error) {
	var e errs
	out := m.alloc(&e, rows.Len(), x.Dim(1))
	e.do(tensor.Embedding(out, x, rows))
	return out, e.err
}

// rowIDs converts row indices to int32.
func rowIDs(rows []int) []int32 {
	out := make([]int32, len(rows))
	for i, r := range rows {
		out[i] = int32(r)
	}
	return out
}

// Backward adds the gradient of a loss to the model's parameter gradients, given
// d loss / d LogProbs and d loss / d Entropy (ragged as LogProbs; either may be nil: zero).
func (s *Scores) Backward(dLogProbs, dEntropy [][]float32) error {
	const op = "hflm.Scores.Backward"
	if s.a == nil {
		return tensor.Errorf(tensor.ErrParam, op, "s", "is not a training pass (Score with train=false)")
	}
	if err := s.m.ensureGrads(); err != nil {
		return err
	}
	mm := len(s.rows)
	d := s.m.Config.HiddenSize
	var e errs
	dHidden := s.m.alloc(&e, s.a.in.n, d)
	if e.err != nil {
		return e.err
	}
	if mm > 0 {
		flat := func(name string, g [][]float32) (*tensor.Tensor, error) {
			if g == nil {
				return nil, nil
			}
			if len(g) != len(s.LogProbs) {
				return nil, tensor.Errorf(tensor.ErrShape, op, name, "has %d rows, want %d", len(g), len(s.LogProbs))
			}
			out, ov := f32(mm)
			k := 0
			for i, r := range g {
				if len(r) != len(s.LogProbs[i]) {
					return nil, tensor.Errorf(tensor.ErrShape, op, name, "row %d has %d values, want %d", i, len(r), len(s.LogProbs[i]))
				}
				copy(ov[k:], r)
				k += s.scored(i) // the padding's positions: zero
			}
			return s.m.upload(out, nil)
		}
		dlp, err := flat("dLogProbs", dLogProbs)
		if err != nil {
			return err
		}
		dent, err := flat("dEntropy", dEntropy)
		if err != nil {
			return err
		}
		dh := s.m.alloc(&e, mm, d)
		e.do(tensor.LMHeadBackward(dh, s.m.headGrad(), tensor.LMHeadGrad{
			LMHeadInputs: s.lmIn, LogProbs: s.lp, Entropy: s.ent,
			DLogProbs: dlp, DEntropy: dent, Accumulate: true, GradBF16: s.m.bf16Grad(),
		}))
		if e.err == nil && !s.m.Config.TieWordEmbeddings {
			s.m.reportFinal("lm_head.weight")
		}
		// Each scored row's gradient into its packed row (the rows are distinct: a copy).
		e.do(tensor.EmbeddingBackward(dHidden, tensor.EmbeddingGrad{IDs: s.rowIDs, DY: dh, Accumulate: true}))
		if e.err != nil {
			return e.err
		}
	}
	return s.m.backward(s.a, dHidden)
}

// headGrad is the gradient of the LM head's weight: lm_head's, or the embeddings' when tied
// (nil when the base is frozen: not computed).
func (m *Model) headGrad() *tensor.Tensor {
	if m.lora != nil {
		return nil
	}
	if m.Config.TieWordEmbeddings {
		return m.byName["model.embed_tokens.weight"].grad
	}
	return m.byName["lm_head.weight"].grad
}
