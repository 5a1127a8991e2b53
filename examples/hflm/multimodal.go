package hflm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// Input is a packed batch for a multimodal model built on this one (Qwen2-VL): token
// sequences whose input embeddings an encoder edits, at rotary positions it gives.
type Input struct {
	Seqs [][]int32
	// Positions, when set, are the rotary positions of the packed tokens, one row of Σ len(Seqs)
	// per M-RoPE section (SetRoPESections); nil: 0, 1, … in each sequence on every axis.
	Positions [][]int32
	// Scatter, when set, edits the input embeddings [N, D] after the token lookup (an image's
	// features replace its placeholder tokens' rows).
	Scatter func(x *tensor.Tensor) error
	// Gather, when set, receives the gradient of the input embeddings [N, D] in the backward,
	// before the embedding table's gradient is taken from it: it reads the rows Scatter wrote
	// and zeroes them (their tokens' embeddings were not used).
	Gather func(dx *tensor.Tensor) error
}

// SetRoPESections makes the rotary embedding Qwen2-VL's M-RoPE: the head_dim/2 frequencies in
// groups of these sizes (mrope_section), group s rotated by position row s. Text-only inputs
// then use the same position on every axis, which equals plain RoPE.
func (m *Model) SetRoPESections(sections []int) error {
	sum := 0
	for _, s := range sections {
		if s < 0 {
			return tensor.Errorf(tensor.ErrParam, "hflm.Model.SetRoPESections", "sections", "%v has a negative size", sections)
		}
		sum += s
	}
	if len(sections) == 0 || sum != m.Config.HeadDim/2 {
		return tensor.Errorf(tensor.ErrParam, "hflm.Model.SetRoPESections", "sections", "%v must sum to head_dim/2 = %d", sections, m.Config.HeadDim/2)
	}
	m.rope.Sections = append([]int(nil), sections...)
	return nil
}

// packInput packs an Input's sequences with its positions and embedding hooks.
func (m *Model) packInput(inp Input) (*packed, error) {
	const op = "hflm.Model"
	in, err := m.packSeqs(inp.Seqs)
	if err != nil {
		return nil, err
	}
	in.scatter, in.gather = inp.Scatter, inp.Gather
	if inp.Positions == nil {
		return in, nil
	}
	k := len(m.rope.Sections)
	if k == 0 || len(inp.Positions) != k {
		return nil, tensor.Errorf(tensor.ErrShape, op, "Positions", "has %d rows; the model has %d M-RoPE sections", len(inp.Positions), k)
	}
	flat := make([]int32, 0, k*in.n)
	for s, row := range inp.Positions {
		if len(row) != in.n {
			return nil, tensor.Errorf(tensor.ErrShape, op, "Positions", "row %d has %d positions for %d tokens", s, len(row), in.n)
		}
		for _, p := range row {
			if p < 0 || int(p) >= m.Config.MaxPositionEmbeddings {
				return nil, tensor.Errorf(tensor.ErrParam, op, "Positions", "position %d is outside [0, max_position_embeddings %d)", p, m.Config.MaxPositionEmbeddings)
			}
		}
		flat = append(flat, row...)
	}
	if in.pos, err = m.ints(flat, k, in.n); err != nil {
		return nil, err
	}
	return in, nil
}

// LogitsInput returns the next-token logits [N, V] of every packed token of the input, on the
// model's backend.
func (m *Model) LogitsInput(inp Input) (*tensor.Tensor, error) {
	in, err := m.packInput(inp)
	if err != nil {
		return nil, err
	}
	a, err := m.forward(in, false, nil)
	if err != nil {
		return nil, err
	}
	logits := m.alloc(&a.e, in.n, m.Config.VocabSize)
	a.e.do(tensor.Linear(logits, m.store(&a.e, a.hidden), m.head))
	return logits, a.e.err
}
