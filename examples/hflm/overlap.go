package hflm

import "github.com/mtrl-go/mtrl/tensor"

// ReportFinal implements loop.FinalGradients through the model's ReportFinal.
func (p *Policy[P]) ReportFinal(hook func(grads ...*tensor.Tensor)) bool {
	return p.Model.ReportFinal(hook)
}

// ReportFinal sets the hook (nil: none) to which, while it is set, Scores.Backward reports
// each parameter gradient (Params' Grad tensors) as soon as the rest of the backward leaves it
// unchanged: an untied lm_head and the final norm first, then each decoder layer from the
// last, the embeddings last; with LoRA each layer's adapters. tprl/loop reduces the buckets
// of the last layers while the first are still being backpropagated. It returns true.
func (m *Model) ReportFinal(hook func(grads ...*tensor.Tensor)) bool {
	m.final = hook
	return true
}

// reportFinal hands the gradients of the named parameters to the hook, when one is set and the
// base is trained (the adapters' are reported by layer).
func (m *Model) reportFinal(names ...string) {
	if m.final == nil || m.lora != nil {
		return
	}
	gs := make([]*tensor.Tensor, 0, len(names))
	for _, n := range names {
		if p := m.byName[n]; p != nil && p.grad != nil {
			gs = append(gs, p.grad)
		}
	}
	m.final(gs...)
}

// reportLayer reports layer l's gradients: its weights, biases and norms, or its adapters'.
func (m *Model) reportLayer(l int) {
	if m.final == nil {
		return
	}
	ly := &m.layers[l]
	var gs []*tensor.Tensor
	for _, lin := range []linear{ly.q, ly.k, ly.v, ly.o, ly.gate, ly.up, ly.down} {
		if m.lora != nil {
			if ad := lin.lora; ad != nil {
				gs = append(gs, ad.ga, ad.gb)
			}
			continue
		}
		gs = append(gs, m.byName[lin.name+".weight"].grad)
		if lin.b != nil {
			gs = append(gs, m.byName[lin.name+".bias"].grad)
		}
	}
	if m.lora == nil {
		gs = append(gs, m.byName[ly.prefix+"input_layernorm.weight"].grad, m.byName[ly.prefix+"post_attention_layernorm.weight"].grad)
	}
	m.final(gs...)
}
