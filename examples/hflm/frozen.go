package hflm

import (
	"errors"

	"github.com/mtrl-go/mtrl/tensor"
)

// freeze holds each weight of a frozen base once: the packed panels the products read, its
// float32 values dropped (tensor.PackedWeight.DropValues), and no transposed panels kept between
// backward passes (KeepTransposed(false): a LoRA backward packs Wᵀ for itself and lets it go).
// The tied embeddings are then read from the head's panels. Without a vector GEMM nothing is
// packed and the values stay. Load already holds every matrix so; a model that was thawed for
// full training is frozen again by AddLoRA.
func (m *Model) freeze() error {
	for i := range m.params {
		if err := m.params[i].freeze(); err != nil {
			return err
		}
	}
	m.embed = m.byName["model.embed_tokens.weight"].value
	return nil
}

func (p *param) freeze() error {
	if p.packed == nil || p.value == nil {
		return nil
	}
	p.packed.KeepTransposed(false)
	if err := p.packed.DropValues(); err != nil {
		if errors.Is(err, tensor.ErrBackend) {
			return nil
		}
		return err
	}
	p.value = nil
	return nil
}

// thaw gives the dropped weights their values back (unpacked from the panels, exactly) and
// packs them anew, for a model that trains in full (its first gradients, MergeLoRA).
func (m *Model) thaw() error {
	thawed := false
	for i := range m.params {
		p := &m.params[i]
		if p.value != nil {
			continue
		}
		v, err := p.packed.Values()
		if err != nil {
			return err
		}
		p.value, p.packed, thawed = v, nil, true
	}
	if !thawed {
		return nil
	}
	m.embed = m.byName["model.embed_tokens.weight"].value
	return m.bind(func(name string) *tensor.Tensor { return m.byName[name].value }, m.packWeight)
}

func (m *Model) headName() string {
	if m.Config.TieWordEmbeddings {
		return "model.embed_tokens.weight"
	}
	return "lm_head.weight"
}

// values returns a weight's float32 values: its own, or a copy unpacked from its panels when
// the base is frozen.
func (p *param) values() (*tensor.Tensor, error) {
	if p.value != nil {
		return p.value, nil
	}
	return p.packed.Values()
}

// shape is the weight's shape (also when only its panels are held).
func (p *param) shape() []int {
	if p.value != nil {
		return p.value.Shape()
	}
	n, k := p.packed.Dims()
	return []int{n, k}
}

// embedInto writes the embeddings of ids into x [N, D]: tensor.Embedding on the table, or rows
// of the tied head's panels when the frozen table was dropped.
func (m *Model) embedInto(x, ids *tensor.Tensor) error {
	if m.embed != nil {
		return tensor.Embedding(x, m.embed, ids)
	}
	iv, err := ids.Int32s()
	if err != nil {
		return err
	}
	d := m.Config.HiddenSize
	xv := host(x)
	for i, id := range iv {
		if int(id) < 0 || int(id) >= m.Config.VocabSize {
			return tensor.Errorf(tensor.ErrParam, "hflm.Model", "ids", "id %d is outside the vocabulary [0, %d)", id, m.Config.VocabSize)
		}
		if err := m.head.Row(int(id), xv[i*d:(i+1)*d]); err != nil {
			return err
		}
	}
	return nil
}
