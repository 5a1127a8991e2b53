package hflm

import (
	"math/rand/v2"
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
	var e errs
	x := m.widen(&e, a.layers[l].xIn)
	if e.err != nil {
		return layerActs{}, nil, e.err
	}
	_, s, err := m.layerForward(l, x, a.in, la, nil)
	if err != nil {
		return layerActs{}, nil, err
	}
	// Stored as the forward without checkpointing stores them, so the backward reads the same
	// tensors (bfloat16 in bf16 mode).
	kept := m.storeLayer(&e, s)
	m.freeStored(s, kept)
	return kept, la, e.err
}
