package hflm

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/tensor"
)

// SetCheckpointing turns activation checkpointing per decoder layer on or off (Hugging Face's
// gradient_checkpointing_enable): a training pass keeps only each layer's input and the
// backward recomputes the layer's activations from it, one layer at a time. The kept
// activations shrink from about 6·D + 3·I values per token and layer (D hidden, I
// intermediate) to D, for one more forward of the layers. The recomputation replays the
// forward exactly (the same ops on the same input, LoRA dropout from the same random state),
// so the gradients are the same bits as with the activations kept.
func (m *Model) SetCheckpointing(on bool) { m.ckpt = on }

// Checkpointing reports whether activation checkpointing is on.
func (m *Model) Checkpointing() bool { return m.ckpt }

// dropState is the LoRA dropout's random state (ok false: no dropout source).
type dropState struct {
	pcg rand.PCG
	ok  bool
}

func (m *Model) dropSave() dropState {
	if m.dropSrc == nil {
		return dropState{}
	}
	return dropState{pcg: *m.dropSrc, ok: true}
}

func (m *Model) dropRestore(s dropState) {
	if s.ok {
		*m.dropSrc = s.pcg
	}
}

// recompute runs layer l's forward again from its kept input, with the dropout state it had in
// the forward, and returns what its backward reads (LoRA's activations in the returned acts).
func (m *Model) recompute(a *acts, l int) (layerActs, *acts, error) {
	m.dropRestore(a.ckpt[l])
	la := m.newActs(a.in, true)
	_, s, err := m.layerForward(l, widen(a.layers[l].xIn), a.in, la, nil)
	if err != nil {
		return layerActs{}, nil, err
	}
	// Stored as the forward without checkpointing stores them, so the backward reads the same
	// tensors (bfloat16 in bf16 mode).
	return m.storeLayer(s), la, nil
}

// widen returns t as float32: t itself, or a float32 copy of a bfloat16 tensor (exact).
func widen(t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.DType() == tensor.Float32 {
		return t
	}
	b, _ := t.BF16s()
	v := make([]float32, len(b))
	for i, h := range b {
		v[i] = h.Float32()
	}
	return tensor.Must(tensor.FromFloat32(v, t.Shape()...))
}
