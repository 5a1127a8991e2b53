package qwenvl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// This file puts LoRA adapters on the vision tower beside the language model's (hflm), chosen
// as PEFT chooses them on Qwen2VLForConditionalGeneration: target_modules and exclude_modules
// match every module of the model, so all-linear takes the tower's linear layers and the
// merger's too (not the Conv3d patch embedding), q_proj takes only the language model's, and
// on Qwen2.5-VL gate_proj, up_proj and down_proj take the tower's MLPs as well as the
// language model's. Under LoRA the whole base is frozen, the tower's included (PEFT marks
// only adapters trainable); freeze_vision_tower also freezes the tower's adapters, as verl
// freezes model.visual after get_peft_model.

// towerAdapter is one LoRA pair on a tower projection: y += scale·B·(A·x), A [r, in], B
// [out, r]. On the patch embedding it is PEFT's Conv3d adapter, whose A is a Conv3d with the
// embedding's kernel ([r, C, T, P, P], the same matrix over pixel_values rows) and B a 1×1×1
// one ([out, r, 1, 1, 1]).
type towerAdapter struct {
	a, b   *tensor.Tensor
	pa, pb *tensor.PackedWeight
	ga, gb *tensor.Tensor
	scale  float32
	module string // visual.blocks.0.attn.qkv, …
	conv   []int  // the patch embedding's kernel [C, T, P, P]; nil: a linear layer
}

// towerLoRA is the tower's LoRA state: its adapters, and the language model's dropout (one
// random stream, so one DropoutState resumes both).
type towerLoRA struct {
	adapters []*towerAdapter
	dropout  float64
	rng      *rand.Rand
}

// loraAct is what an adapter's backward reads: its input, A·x and, with dropout, which input
// elements were kept.
type loraAct struct {
	x, t *tensor.Tensor
	kept []bool
	keep float32 // a kept element's scale, 1/(1-p)
}

// linears returns pointers to the tower's projections, in the order of visionSpecs.
func (t *Vision) linears() []*linear {
	out := []*linear{&t.patch}
	for i := range t.blocks {
		b := &t.blocks[i]
		out = append(out, &b.qkv, &b.proj)
		if t.gated {
			out = append(out, &b.gate, &b.up, &b.down)
		} else {
			out = append(out, &b.fc1, &b.fc2)
		}
	}
	return append(out, &t.mlp0, &t.mlp2)
}

// trains reports whether a training pass runs the tower's backward: it is not frozen, and
// under LoRA it has adapters (its base is frozen then).
func (t *Vision) trains() bool {
	return !t.Frozen && !t.loraOff && (t.lora == nil || len(t.lora.adapters) > 0)
}

// adapterOf returns l's adapter when adapters are on.
func (t *Vision) adapterOf(l linear) *towerAdapter {
	if t.loraOff {
		return nil
	}
	return l.lora
}

// adapt adds l's adapter, scale·B·(A·x), to y = l(x) (nothing without one). With a (a
// training pass) it applies the dropout and keeps the adapter's activations.
func (t *Vision) adapt(y, x *tensor.Tensor, l linear, a *VisionActs) error {
	ad := t.adapterOf(l)
	if ad == nil {
		return nil
	}
	r, in, out := ad.a.Dim(0), ad.a.Dim(1), ad.b.Dim(0)
	var e errs
	x2 := t.widen(&e, x) // the adapters compute and keep their inputs in float32
	if e.err != nil {
		return e.err
	}
	x2, err := x2.Reshape(-1, in)
	if err != nil {
		return err
	}
	n := x2.Dim(0)
	act := loraAct{x: x2}
	xin := x2
	if a != nil && t.lora.dropout > 0 {
		act.kept = make([]bool, n*in)
		act.keep = float32(1 / (1 - t.lora.dropout))
		for i := range act.kept {
			act.kept[i] = t.lora.rng.Float64() >= t.lora.dropout
		}
		xin = t.dropped(&e, act)
	}
	act.t = t.alloc(&e, n, r)
	u := t.alloc(&e, n, out)
	e.do(tensor.Linear(act.t, xin, ad.pa))
	e.do(tensor.Linear(u, act.t, ad.pb))
	e.do(tensor.Axpby(view(&e, y, n, out), u, ad.scale, 1)) // y += scale·u
	if e.err != nil {
		return e.err
	}
	if a != nil {
		a.lora[ad] = act
	}
	return nil
}

// dropMask returns the dropout's multipliers of act's input on the tower's backend: 1/(1-p)
// where an element was kept, 0 where it was dropped (drawn on the host, uploaded on a device).
func (t *Vision) dropMask(e *errs, act loraAct) *tensor.Tensor {
	h, hv := f32(act.x.Shape()...)
	for i, k := range act.kept {
		if k {
			hv[i] = act.keep
		}
	}
	mask, err := t.upload(h, nil)
	e.do(err)
	return mask
}

// dropped is the adapter's dropped-out input x·mask/(1-p).
func (t *Vision) dropped(e *errs, act loraAct) *tensor.Tensor {
	xd := t.alloc(e, act.x.Shape()...)
	e.do(tensor.Mul(xd, act.x, t.dropMask(e, act)))
	return xd
}

// adaptBackward adds l's adapter gradients given dy, and its part of dx (nil: not wanted).
func (t *Vision) adaptBackward(dx, dy *tensor.Tensor, l linear, a *VisionActs) error {
	ad := t.adapterOf(l)
	if ad == nil {
		return nil
	}
	act, ok := a.lora[ad]
	if !ok {
		return fmt.Errorf("qwenvl: no activations of the adapter of %s (forward without keep)", ad.module)
	}
	r, in, out := ad.a.Dim(0), ad.a.Dim(1), ad.b.Dim(0)
	n := act.x.Dim(0)
	var e errs
	dys := t.alloc(&e, n, out)
	e.do(tensor.Axpby(dys, view(&e, dy, n, out), ad.scale, 0)) // dys = scale·dy
	dt := t.alloc(&e, n, r)
	e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dt, DWeight: ad.gb}, tensor.LinearGrad{X: act.t, Weight: ad.pb, DY: dys, Accumulate: true}))
	xin := act.x
	if act.kept != nil {
		xin = t.dropped(&e, act)
	}
	out2 := tensor.LinearGradOut{DWeight: ad.ga}
	if dx != nil {
		out2.DX = t.alloc(&e, n, in)
	}
	e.do(tensor.LinearBackward(out2, tensor.LinearGrad{X: xin, Weight: ad.pa, DY: dt, Accumulate: true}))
	if e.err != nil || dx == nil {
		return e.err
	}
	if act.kept != nil { // the dropped elements get no gradient
		e.do(tensor.Mul(out2.DX, out2.DX, t.dropMask(&e, act)))
	}
	e.do(add(view(&e, dx, n, in), out2.DX))
	return e.err
}

func (ad *towerAdapter) pack() error {
	var err error
	if ad.pa, err = tensor.PackWeight(ad.a); err != nil {
		return err
	}
	ad.pb, err = tensor.PackWeight(ad.b)
	return err
}

// peftShapes are the shapes of lora_A and lora_B as PEFT stores them.
func (ad *towerAdapter) peftShapes() (a, b []int) {
	r := ad.a.Dim(0)
	if ad.conv != nil {
		return append([]int{r}, ad.conv...), []int{ad.b.Dim(0), r, 1, 1, 1}
	}
	return ad.a.Shape(), ad.b.Shape()
}

// product is B·A [out, in] on the adapter's backend.
func (t *Vision) product(ad *towerAdapter) (*tensor.Tensor, error) {
	var e errs
	ba := t.alloc(&e, ad.b.Dim(0), ad.a.Dim(1))
	e.do(tensor.MatMul(ba, ad.b, ad.a, tensor.MatMulOptions{}))
	return ba, e.err
}

// delta is scale·B·A [out, in] on the host, the adapter's change of its base weight.
func (t *Vision) delta(ad *towerAdapter) ([]float32, error) {
	ba, err := t.product(ad)
	if err != nil {
		return nil, err
	}
	v, err := tensor.HostFloat32s(ba)
	if err != nil {
		return nil, err
	}
	for i := range v {
		v[i] *= ad.scale
	}
	return v, nil
}

// nestedLM is a language-model module's name in transformers ≥ 4.52's layout.
func nestedLM(name string) string {
	return "model.language_model." + strings.TrimPrefix(name, "model.")
}

// AddLoRA adds LoRA adapters as PEFT's get_peft_model(model, LoraConfig(...)) would on this
// model: cfg.TargetModules and cfg.ExcludeModules (hflm.LoRAConfig.Resolve) match the
// language model's projections and the tower's linear layers by either layout's names
// (model.layers.0.self_attn.q_proj or model.language_model.…; visual.blocks.0.attn.qkv or
// model.visual.…). The base, the tower's included, is frozen from now on: only adapters
// train, and the tower's only while Vision.Frozen is false.
func (m *Model) AddLoRA(cfg hflm.LoRAConfig) error {
	const op = "qwenvl.Model.AddLoRA"
	if m.lora != nil {
		return tensor.Errorf(tensor.ErrParam, op, "m", "already has adapters")
	}
	lmNames := m.LM.ProjectionNames()
	tower := m.Vision.linears()
	var mods []hflm.LoRAModule
	for _, n := range lmNames {
		mods = append(mods, hflm.LoRAModule{Names: []string{n, nestedLM(n)}, Linear: true})
	}
	for _, l := range tower {
		mods = append(mods, hflm.LoRAModule{Names: []string{l.name, "model." + l.name}, Linear: l != &m.Vision.patch})
	}
	sel, err := cfg.Resolve(mods)
	if err != nil {
		return err
	}
	on := map[string]bool{}
	for i, n := range lmNames {
		on[n] = sel[i]
	}
	if err := m.LM.AddLoRAWhere(cfg, func(n string) bool { return on[n] }); err != nil {
		return err
	}
	p, rng := m.LM.LoRADropout()
	if err := m.Vision.addLoRA(cfg, func(i int) bool { return sel[len(lmNames)+i] }, p, rng); err != nil {
		return err
	}
	c := cfg
	m.lora = &c
	return nil
}

// addLoRA adds adapters to the projections (in linears' order) that on selects, freezing the
// base; their dropout draws from rng.
func (t *Vision) addLoRA(cfg hflm.LoRAConfig, on func(i int) bool, dropout float64, rng *rand.Rand) error {
	t.lora = &towerLoRA{dropout: dropout, rng: rng}
	init := rand.New(rand.NewPCG(cfg.Seed, 0x715))
	scale := float32(cfg.Alpha / float64(cfg.Rank))
	for i, l := range t.linears() {
		if !on(i) {
			continue
		}
		out, in := l.w.Dims()
		ah, av := f32(cfg.Rank, in)
		bound := 1 / math.Sqrt(float64(in)) // PEFT's Kaiming-uniform (a = √5) of A; B zero
		for j := range av {
			av[j] = float32((2*init.Float64() - 1) * bound)
		}
		a, err := t.upload(ah, nil) // drawn on the host, uploaded once
		if err != nil {
			return err
		}
		var e errs
		ad := &towerAdapter{a: a, b: t.alloc(&e, out, cfg.Rank), scale: scale, module: l.name}
		if l == &t.patch {
			v := t.cfg
			ad.conv = []int{v.InChannels, v.TemporalPatchSize, v.PatchSize, v.PatchSize}
		}
		ad.ga, ad.gb = t.alloc(&e, cfg.Rank, in), t.alloc(&e, out, cfg.Rank)
		if e.err != nil {
			return e.err
		}
		if err := ad.pack(); err != nil {
			return err
		}
		l.lora = ad
		t.lora.adapters = append(t.lora.adapters, ad)
	}
	return nil
}

// Base returns the model with every adapter disabled, sharing every weight (no copy) and its
// tower frozen: the reference policy of a LoRA run.
func (m *Model) Base() *Model {
	v := *m.Vision
	v.loraOff, v.Frozen = true, true
	return &Model{Config: m.Config, Vision: &v, LM: m.LM.Base(), lora: m.lora}
}

// TowerAdapters is the number of the tower's adapters.
func (m *Model) TowerAdapters() int {
	if m.Vision.lora == nil {
		return 0
	}
	return len(m.Vision.lora.adapters)
}

// MergeLoRA folds every adapter into its base weight (W += scale·B·A) and removes them: the
// model PEFT's merge_and_unload gives, to export.
func (m *Model) MergeLoRA() error {
	if m.lora == nil {
		return tensor.Errorf(tensor.ErrParam, "qwenvl.Model.MergeLoRA", "m", "has no adapters")
	}
	if err := m.LM.MergeLoRA(); err != nil {
		return err
	}
	t := m.Vision
	for _, l := range t.linears() {
		if l.lora == nil {
			continue
		}
		ba, err := t.product(l.lora)
		if err != nil {
			return err
		}
		p := t.byName[l.name+".weight"]
		if err := tensor.Axpby(p.value, ba, l.lora.scale, 1); err != nil { // W += scale·(B·A)
			return err
		}
		if p.packed != nil { // (in bf16 mode the copies are rounded again below)
			if err := p.packed.Repack(); err != nil {
				return err
			}
		}
		l.lora = nil
	}
	t.lora, m.lora = nil, nil
	if t.mp != nil {
		return t.mp.Refresh()
	}
	return nil
}

// peftTensor is one adapter tensor under PEFT's name with its stored shape.
type peftTensor struct {
	name  string
	shape []int
	value *tensor.Tensor
}

// peftTensors lists every adapter tensor, the language model's then the tower's, named as
// PEFT's get_peft_model_state_dict names them on the legacy layout
// (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight,
// base_model.model.visual.blocks.0.attn.qkv.lora_B.weight).
func (m *Model) peftTensors() ([]peftTensor, error) {
	ps, err := m.LM.Params()
	if err != nil {
		return nil, err
	}
	var out []peftTensor
	for _, p := range ps {
		out = append(out, peftTensor{p.Name, p.Value.Shape(), p.Value})
	}
	if m.Vision.lora != nil {
		for _, ad := range m.Vision.lora.adapters {
			sa, sb := ad.peftShapes()
			base := "base_model.model." + ad.module
			out = append(out, peftTensor{base + ".lora_A.weight", sa, ad.a}, peftTensor{base + ".lora_B.weight", sb, ad.b})
		}
	}
	return out, nil
}

// SaveLoRA writes the adapters as PEFT's save_pretrained does: adapter_config.json (the
// target_modules and exclude_modules AddLoRA was given, which select the same modules when
// PEFT loads them) and adapter_model.safetensors (float32), the tower's adapters included.
func (m *Model) SaveLoRA(dir, baseModel string) error {
	if m.lora == nil {
		return tensor.Errorf(tensor.ErrParam, "qwenvl.Model.SaveLoRA", "m", "has no adapters")
	}
	ts, err := m.peftTensors()
	if err != nil {
		return err
	}
	if err := hflm.WriteAdapterConfig(dir, *m.lora, baseModel); err != nil {
		return err
	}
	var hts []*hfmodel.Tensor
	for _, p := range ts {
		v, err := tensor.HostFloat32s(p.value)
		if err != nil {
			return err
		}
		t, err := hfmodel.NewTensor(p.name, p.shape, v, hfmodel.Float32)
		if err != nil {
			return err
		}
		hts = append(hts, t)
	}
	return hfmodel.WriteSafetensors(filepath.Join(dir, hflm.AdapterWeightsFile), hts)
}

// LoadLoRA adds the adapters of a PEFT directory (SaveLoRA's, or PEFT's own for this model on
// the legacy layout): a plain LoRA whose weights are exactly the selected modules' lora_A and
// lora_B.
func (m *Model) LoadLoRA(dir string) error {
	const op = "qwenvl.Model.LoadLoRA"
	cfg, err := hflm.ReadAdapterConfig(dir)
	if err != nil {
		return err
	}
	if err := m.AddLoRA(cfg); err != nil {
		return err
	}
	files, err := hfmodel.ReadSafetensors(filepath.Join(dir, hflm.AdapterWeightsFile))
	if err != nil {
		return err
	}
	byName := map[string]*hfmodel.Tensor{}
	for _, f := range files {
		byName[f.Name] = f
	}
	ts, err := m.peftTensors()
	if err != nil {
		return err
	}
	for _, p := range ts {
		f := byName[p.name]
		if f == nil || !slices.Equal(f.Shape, p.shape) {
			return tensor.Errorf(tensor.ErrShape, op, p.name, "missing or not of shape %v", p.shape)
		}
		h, err := tensor.FromFloat32(f.Float32s(), p.value.Shape()...)
		if err == nil {
			err = tensor.CopyInto(p.value, h)
		}
		if err != nil {
			return err
		}
		delete(byName, p.name)
	}
	for name := range byName {
		return tensor.Errorf(tensor.ErrParam, op, name, "is not an adapter of the selected modules")
	}
	return m.repackAdapters()
}

// repackAdapters rebuilds the adapters' packed matrices after their values changed.
func (m *Model) repackAdapters() error {
	if err := m.LM.Repack(); err != nil {
		return err
	}
	return m.Vision.Repack()
}
