package hflm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// LoRAConfig is PEFT's LoraConfig as the seed sets it (lora_rank, lora_alpha, lora_dropout,
// target_modules).
type LoRAConfig struct {
	Rank    int     // r > 0
	Alpha   float64 // the update is scaled by Alpha / Rank
	Dropout float64 // in [0, 1): dropout on the adapter's input in training passes
	// TargetModules are module names, each matching a module whose name it equals or ends
	// (after a dot) — q_proj, self_attn.q_proj, model.layers.0.mlp.down_proj — or one regular
	// expression matching whole names, or "all-linear": every projection (PEFT leaves lm_head
	// out). See Resolve.
	TargetModules []string
	// ExcludeModules (PEFT's exclude_modules) are module names or one regular expression whose
	// modules get no adapter even when targeted.
	ExcludeModules []string
	Seed           uint64 // A's initialisation and the dropout masks
}

// Files of a PEFT adapter directory.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

var projections = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// adapter is one LoRA pair on a projection: y += scale · B·(A·x), A [r, in], B [out, r].
type adapter struct {
	a, b         *tensor.Tensor
	pa, pb       *tensor.PackedWeight
	ga, gb       *tensor.Tensor // gradients
	scale        float32
	module, peft string // e.g. model.layers.0.self_attn.q_proj and its PEFT prefix
}

// loraAct is what an adapter's backward reads: its input, A·x and, with dropout, which input
// elements were kept (the dropped-out input is rebuilt from them, not stored: adapters that
// share an input, q, k and v, keep one copy of it).
type loraAct struct {
	x, t *tensor.Tensor
	kept []uint64 // dropout's mask, a bit per input element (nil: no dropout)
	keep float32  // the scale of a kept element, 1/(1-p)
}

// dropMask returns the dropout's multipliers of act's input as a float32 tensor on the model's
// backend: 1/(1-p) where an element was kept, 0 where it was dropped. The mask is drawn and
// kept on the host as bits; it is expanded (and uploaded, on a device) when a pass reads it.
func (m *Model) dropMask(e *errs, act loraAct) *tensor.Tensor {
	n, in := act.x.Dim(0), act.x.Dim(1)
	h, hv := f32(n, in)
	for i := range hv {
		if act.kept[i/64]&(1<<(i%64)) != 0 {
			hv[i] = act.keep
		}
	}
	if m.onHost() {
		return h
	}
	mask := m.scratchF32(e, 2, n, in)
	e.do(tensor.CopyInto(mask, h))
	return mask
}

// dropped writes the adapter's dropped-out input x·mask/(1-p) into a scratch tensor.
func (m *Model) dropped(e *errs, act loraAct) *tensor.Tensor {
	n, in := act.x.Dim(0), act.x.Dim(1)
	xd := m.scratchF32(e, 0, n, in)
	e.do(tensor.Mul(xd, act.x, m.dropMask(e, act)))
	return xd
}

// scratchF32 returns slot i of the model's reused buffers as a float32 tensor of the shape on
// its backend (contents undefined): the adapters' temporaries, which would otherwise be
// garbage every call.
func (m *Model) scratchF32(e *errs, i int, shape ...int) *tensor.Tensor {
	m.scratch[i] = m.grown(e, m.scratch[i], shape...)
	return m.view(e, m.scratch[i], shape...)
}

// AddLoRA adds adapters to the projections cfg selects (LoRAConfig.Resolve), initialised as
// PEFT does (A Kaiming-uniform with a = √5, that is U(±1/√in); B zero, so the model is
// unchanged), and freezes the base: from now on only the adapters are trained (Params lists
// them alone).
func (m *Model) AddLoRA(cfg LoRAConfig) error {
	names := m.ProjectionNames()
	mods := make([]LoRAModule, len(names))
	for i, n := range names {
		mods[i] = LoRAModule{Names: []string{n}, Linear: true}
	}
	sel, err := cfg.Resolve(mods)
	if err != nil {
		return err
	}
	on := map[string]bool{}
	for i, n := range names {
		on[n] = sel[i]
	}
	c := cfg
	if short := shortTargets(cfg.TargetModules); short != nil {
		c.TargetModules = short
	}
	return m.AddLoRAWhere(c, func(module string) bool { return on[module] })
}

// shortTargets returns targets in projection order when they are projection names or
// all-linear (which for a causal LM is every projection), else nil.
func shortTargets(targets []string) []string {
	set := map[string]bool{}
	for _, t := range targets {
		switch {
		case strings.EqualFold(t, AllLinear):
			for _, p := range projections {
				set[p] = true
			}
		case slices.Contains(projections, t):
			set[t] = true
		default:
			return nil
		}
	}
	var out []string
	for _, p := range projections {
		if set[p] {
			out = append(out, p)
		}
	}
	return out
}

// ProjectionNames are the names of the projections an adapter can go on, in layer and
// projection order (model.layers.0.self_attn.q_proj, …).
func (m *Model) ProjectionNames() []string {
	var out []string
	for l := range m.layers {
		for _, lin := range m.layers[l].linears() {
			out = append(out, lin.name)
		}
	}
	return out
}

// AddLoRAWhere is AddLoRA on the projections that on selects (by name; none is allowed: a model
// whose adapters are elsewhere, on a vision tower, keeps its base frozen), cfg's targets being
// what adapter_config.json records. cfg.Dropout also applies to adapters outside this model
// that draw from LoRADropout.
func (m *Model) AddLoRAWhere(cfg LoRAConfig, on func(module string) bool) error {
	const op = "hflm.Model.AddLoRA"
	switch {
	case m.lora != nil:
		return tensor.Errorf(tensor.ErrParam, op, "m", "already has adapters")
	case cfg.Rank <= 0:
		return tensor.Errorf(tensor.ErrParam, op, "Rank", "is %d, want > 0", cfg.Rank)
	case !(cfg.Alpha > 0) || math.IsInf(cfg.Alpha, 1):
		return tensor.Errorf(tensor.ErrParam, op, "Alpha", "is %v, want a finite value > 0", cfg.Alpha)
	case !(cfg.Dropout >= 0 && cfg.Dropout < 1):
		return tensor.Errorf(tensor.ErrParam, op, "Dropout", "is %v, want a value in [0, 1)", cfg.Dropout)
	}
	c := cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10ea))
	scale := float32(cfg.Alpha / float64(cfg.Rank))
	for l := range m.layers {
		for _, lin := range m.layers[l].linears() {
			if !on(lin.name) {
				continue
			}
			out, in := lin.w.Dims()
			a, av := f32(cfg.Rank, in)
			bound := 1 / math.Sqrt(float64(in))
			for i := range av {
				av[i] = float32((2*rng.Float64() - 1) * bound)
			}
			a, err := m.upload(a, nil) // drawn on the host, uploaded once
			if err != nil {
				return err
			}
			var e errs
			ad := &adapter{a: a, b: m.alloc(&e, out, cfg.Rank), scale: scale, module: lin.name, peft: "base_model.model." + lin.name}
			ad.ga, ad.gb = m.alloc(&e, cfg.Rank, in), m.alloc(&e, out, cfg.Rank)
			if e.err != nil {
				return e.err
			}
			if err := ad.pack(); err != nil {
				return err
			}
			lin.lora = ad
			m.adapters = append(m.adapters, ad)
		}
	}
	var e errs
	m.frozenEnv = &frozenGrads{norm: m.alloc(&e, m.Config.HiddenSize)}
	if e.err != nil {
		return e.err
	}
	m.lora = &c
	m.dropSrc = rand.NewPCG(cfg.Seed, 0xd0)
	m.dropRNG = rand.New(m.dropSrc)
	return m.freeze()
}

// LoRADropout returns the adapters' dropout probability and the random source of their masks
// (nil without adapters): adapters outside the model (a vision tower's) draw from it too, so
// that DropoutState resumes them all.
func (m *Model) LoRADropout() (float64, *rand.Rand) {
	if m.lora == nil {
		return 0, nil
	}
	return m.lora.Dropout, m.dropRNG
}

// DropoutState is the state of the random source of the adapters' dropout masks (nil without
// adapters): with the weights and the optimizer, what an exact resume of LoRA training needs.
func (m *Model) DropoutState() ([]byte, error) {
	if m.dropSrc == nil {
		return nil, nil
	}
	return m.dropSrc.MarshalBinary()
}

// SetDropoutState restores a DropoutState.
func (m *Model) SetDropoutState(state []byte) error {
	const op = "hflm.Model.SetDropoutState"
	if m.dropSrc == nil {
		return tensor.Errorf(tensor.ErrParam, op, "m", "has no adapters")
	}
	src := &rand.PCG{}
	if err := src.UnmarshalBinary(state); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, "state", "%v", err)
	}
	*m.dropSrc = *src
	return nil
}

func (ad *adapter) pack() error {
	var err error
	if ad.pa, err = tensor.PackWeight(ad.a); err != nil {
		return err
	}
	ad.pb, err = tensor.PackWeight(ad.b)
	return err
}

// linears returns pointers to the layer's projections.
func (ly *layer) linears() []*linear {
	return []*linear{&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down}
}

// short is the projection's name without its module path (q_proj, …).
func (l *linear) short() string { return filepath.Ext(l.name)[1:] }

// Base returns the model with its adapters disabled, sharing every weight (no copy): the
// reference policy of a LoRA run, as TRL computes it.
func (m *Model) Base() *Model {
	b := *m
	b.loraOff = true
	return &b
}

// adapterOf returns l's adapter when it is active.
func (m *Model) adapterOf(l linear) *adapter {
	if m.loraOff {
		return nil
	}
	return l.lora
}

// loraForward adds scale·B·(A·x) to y; a training pass (a.keep) applies the dropout and keeps
// the adapter's activations.
func (m *Model) loraForward(y, x *tensor.Tensor, ad *adapter, a *acts) error {
	r := ad.a.Dim(0)
	in, out := ad.a.Dim(1), ad.b.Dim(0)
	x2, err := x.Reshape(-1, in)
	if err != nil {
		return err
	}
	n := x2.Dim(0)
	act := loraAct{x: x2}
	xin := x2
	var e errs
	if a != nil && a.keep && m.lora.Dropout > 0 {
		act.kept = make([]uint64, (n*in+63)/64)
		act.keep = float32(1 / (1 - m.lora.Dropout))
		for i := range n * in {
			if m.dropRNG.Float64() >= m.lora.Dropout {
				act.kept[i/64] |= 1 << (i % 64)
			}
		}
		xin = m.dropped(&e, act)
	}
	act.t = m.alloc(&e, n, r)
	e.do(tensor.Linear(act.t, xin, ad.pa))
	u := m.scratchF32(&e, 1, n, out)
	e.do(tensor.Linear(u, act.t, ad.pb))
	y2, err := y.Reshape(-1, out)
	e.do(err)
	if err == nil {
		e.do(tensor.Axpby(y2, u, ad.scale, 1)) // y += scale·u
	}
	if e.err != nil {
		return e.err
	}
	if a != nil && a.keep {
		a.lora[ad] = act
	}
	return nil
}

// loraBackward adds the adapter's gradients and its part of dx (dx += ...) given dy.
func (m *Model) loraBackward(dx, dy *tensor.Tensor, ad *adapter, a *acts) error {
	act, ok := a.lora[ad]
	if !ok {
		return fmt.Errorf("hflm: no activations of the adapter of %s (forward without keep)", ad.module)
	}
	r := ad.a.Dim(0)
	in, out := ad.a.Dim(1), ad.b.Dim(0)
	n := act.x.Dim(0)
	var e errs
	dys := m.scratchF32(&e, 1, n, out)
	e.do(tensor.Axpby(dys, dy, ad.scale, 0)) // dys = scale·dy
	dt := m.alloc(&e, n, r)
	e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dt, DWeight: ad.gb}, tensor.LinearGrad{X: act.t, Weight: ad.pb, DY: dys, Accumulate: true}))
	xin := act.x
	if act.kept != nil {
		xin = m.dropped(&e, act)
	}
	dxa := m.scratchF32(&e, 1, n, in) // dys is dead
	e.do(tensor.LinearBackward(tensor.LinearGradOut{DX: dxa, DWeight: ad.ga}, tensor.LinearGrad{X: xin, Weight: ad.pa, DY: dt, Accumulate: true}))
	if act.kept != nil {
		e.do(tensor.Mul(dxa, dxa, m.dropMask(&e, act))) // the dropped elements get no gradient
	}
	e.do(add(dx, dxa))
	return e.err
}

// MergeLoRA folds the adapters into the base weights (W += scale·B·A, rounded to float32 once)
// and removes them: the model a PEFT merge_and_unload gives, to export.
func (m *Model) MergeLoRA() error {
	if err := m.thaw(); err != nil {
		return err
	}
	for _, ad := range m.adapters {
		p := m.byName[ad.module+".weight"]
		ba, err := m.product(ad)
		if err != nil {
			return err
		}
		if err := tensor.Axpby(p.value, ba, ad.scale, 1); err != nil { // W += scale·(B·A)
			return err
		}
		if p.packed != nil { // nil in bf16 mode: its copy is refreshed below
			if err := p.packed.Repack(); err != nil {
				return err
			}
		}
	}
	if m.mp != nil {
		if err := m.mp.Refresh(); err != nil {
			return err
		}
	}
	for l := range m.layers {
		for _, lin := range m.layers[l].linears() {
			lin.lora = nil
		}
	}
	m.adapters, m.lora = nil, nil
	return nil
}

// product returns B·A [out, in] on the model's backend.
func (m *Model) product(ad *adapter) (*tensor.Tensor, error) {
	var e errs
	ba := m.alloc(&e, ad.b.Dim(0), ad.a.Dim(1))
	e.do(tensor.MatMul(ba, ad.b, ad.a, tensor.MatMulOptions{}))
	return ba, e.err
}

// delta returns scale·B·A [out, in] on the host, the adapter's change of its base weight.
func (m *Model) delta(ad *adapter) ([]float32, error) {
	ba, err := m.product(ad)
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

// SaveLoRA writes the adapters (downloaded from the model's backend) as PEFT's save_pretrained
// does: adapter_config.json and adapter_model.safetensors (float32) with PEFT's names,
// base_model.model.model.layers.i.self_attn.q_proj.lora_A.weight and so on. baseModel is
// written as base_model_name_or_path.
func (m *Model) SaveLoRA(dir, baseModel string) error {
	const op = "hflm.Model.SaveLoRA"
	if m.lora == nil {
		return tensor.Errorf(tensor.ErrParam, op, "m", "has no adapters")
	}
	if err := WriteAdapterConfig(dir, *m.lora, baseModel); err != nil {
		return err
	}
	var ts []*hfmodel.Tensor
	for _, ad := range m.adapters {
		for _, p := range []struct {
			suffix string
			t      *tensor.Tensor
		}{{".lora_A.weight", ad.a}, {".lora_B.weight", ad.b}} {
			v, err := tensor.HostFloat32s(p.t)
			if err != nil {
				return err
			}
			t, err := hfmodel.NewTensor(ad.peft+p.suffix, p.t.Shape(), v, hfmodel.Float32)
			if err != nil {
				return err
			}
			ts = append(ts, t)
		}
	}
	return hfmodel.WriteSafetensors(filepath.Join(dir, AdapterWeightsFile), ts)
}

// LoadLoRA adds the adapters a PEFT directory holds (SaveLoRA's, or PEFT's own for this
// model): its adapter_config.json must be a LoRA without biases, DoRA or rsLoRA, and its
// weights exactly the targeted projections' lora_A and lora_B.
func (m *Model) LoadLoRA(dir string) error {
	const op = "hflm.Model.LoadLoRA"
	ac, err := ReadAdapterConfig(dir)
	if err != nil {
		return err
	}
	if err := m.AddLoRA(ac); err != nil {
		return err
	}
	ts, err := hfmodel.ReadSafetensors(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return err
	}
	byName := map[string]*hfmodel.Tensor{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	for _, ad := range m.adapters {
		for _, p := range []struct {
			suffix string
			t      *tensor.Tensor
		}{{".lora_A.weight", ad.a}, {".lora_B.weight", ad.b}} {
			name := ad.peft + p.suffix
			t := byName[name]
			if t == nil || !slices.Equal(t.Shape, p.t.Shape()) {
				return tensor.Errorf(tensor.ErrShape, op, name, "missing or not of shape %v", p.t.Shape())
			}
			if err := tensor.CopyInto(p.t, tensor.Must(tensor.FromFloat32(t.Float32s(), p.t.Shape()...))); err != nil {
				return err
			}
			delete(byName, name)
		}
		if err := ad.pack(); err != nil {
			return err
		}
	}
	for name := range byName {
		return tensor.Errorf(tensor.ErrParam, op, name, "is not an adapter of the targeted projections")
	}
	return nil
}

// frozen returns the scratch gradients of the frozen base (allocated by AddLoRA).
func (m *Model) frozen() *frozenGrads {
	return m.frozenEnv
}
