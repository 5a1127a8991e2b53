package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// UseOps makes Forward and Backward run through the op set o (a CUDAOps: on a GPU) instead of
// the host kernels; nil goes back to the host. The parameters stay host tensors and remain the
// model's state (the optimizer, checkpoints and Generate use them unchanged): each Forward
// uploads the weights to o's backend, each Backward runs on the device and adds the gradients to
// the host's G. Logits come back to the host. This moves the model's FLOPs to the device; the
// per-call weight and logits transfers are what is left to remove (see the README).
func (m *Model) UseOps(o Ops) error {
	if m.dev != nil {
		m.dev.Release()
		m.dev = nil
	}
	if o == nil {
		return nil
	}
	om, err := NewOpsModel(m, o)
	if err != nil {
		return err
	}
	m.dev = om
	return nil
}

// forwardOps is Forward on the op set (the tokens were validated by Forward).
func (m *Model) forwardOps(images, tokens *tensor.Tensor) (*tensor.Tensor, *Activations, error) {
	for i, p := range m.params {
		if err := tensor.CopyInto(m.dev.params[i].W, p.W); err != nil {
			return nil, nil, err
		}
	}
	logits, act, err := m.dev.Forward(images, tokens)
	if err != nil {
		return nil, nil, err
	}
	host, err := tensor.To(tensor.CPU(), logits)
	_ = logits.Release()
	if err != nil {
		act.Release()
		return nil, nil, err
	}
	return host, &Activations{m: m, dev: act}, nil
}

// backwardOps is Backward on the op set: the gradients of this call on the device, then added
// to the host's G in float32 (as the host kernels' accumulation into G would).
func (m *Model) backwardOps(act *Activations, dlogits *tensor.Tensor) error {
	if err := m.dev.ZeroGrad(); err != nil {
		return err
	}
	dl, err := tensor.To(m.dev.ops.Backend(), dlogits)
	if err != nil {
		return err
	}
	if dl != dlogits {
		defer dl.Release()
	}
	if err := m.dev.Backward(act.dev, dl); err != nil {
		return err
	}
	for i, p := range m.params {
		g, err := tensor.To(tensor.CPU(), m.dev.params[i].G)
		if err != nil {
			return err
		}
		gv, _ := g.Float32s()
		hv, _ := p.G.Float32s()
		for j, v := range gv {
			hv[j] += v
		}
	}
	return nil
}

// attentionProbs returns the attention probabilities [B, H, S, S] of one block.
func (a *Activations) attentionProbs(layer int) []float32 {
	if a.dev == nil {
		return a.a.layers[layer].p
	}
	if p, ok := a.probs[layer]; ok {
		return p
	}
	if a.probs == nil {
		a.probs = map[int][]float32{}
	}
	h, err := tensor.To(tensor.CPU(), a.dev.layers[layer].p)
	var p []float32
	if err == nil {
		p, _ = h.Float32s()
	}
	a.probs[layer] = p
	return p
}

// Release frees the device memory of a record made on an op set (UseOps); host records need
// nothing (the garbage collector frees device memory too, later).
func (a *Activations) Release() {
	if a != nil && a.dev != nil {
		a.dev.Release()
	}
}
