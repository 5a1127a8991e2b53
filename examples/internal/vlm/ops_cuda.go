//go:build cuda

package vlm

import (
	"math"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm/kernels"
	"github.com/mtrl-go/mtrl/tensor"
)

// CUDAOps is the op set on a cuda.Backend. The layers run the SDK's ops, which the
// cuda.Backend implements; CUDAOps adds the elementwise sum the model needs (Add), the MDI
// reward's attention sums (LSEMass), the device sampler of a rollout (SampleUniform) and the
// optimizer's kernels the example trainer keeps on the device (AdamW, GradNorm, ClipGrads, Zero,
// Scale): the kernels of package kernels, loaded
// with cuda.Backend.LoadModule and launched on the backend's stream, one thread per output where
// the host sums in order (so the device adds the host's bits).
type CUDAOps struct {
	Config Config
	b      *cuda.Backend
	k      map[string]*cuda.Kernel
}

var _ Ops = (*CUDAOps)(nil)

// NewCUDAOps loads the model's kernels on b.
func NewCUDAOps(c Config, b *cuda.Backend) (*CUDAOps, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o := &CUDAOps{Config: c, b: b, k: map[string]*cuda.Kernel{}}
	f32 := cuda.TensorParam(tensor.Float32)
	i32 := cuda.TensorParam(tensor.Int32)
	I, F := cuda.IntParam, cuda.Float32Param
	sigs := map[string][]cuda.Param{
		// probs is float64 scratch, passed as an int32 tensor of twice the length.
		"vlm_sample_f32":   {i32, f32, i32, i32, I, I, cuda.Float64Param, cuda.Float64Param, I, I, I},
		"vlm_adamw_f32":    {f32, f32, f32, f32, I, F, F, F, F, F, F},
		"vlm_sumsq_f32":    {i32, f32, I}, // out: one float64 as two int32
		"vlm_scale_f32":    {f32, I, F},
		"vlm_sample_u_f32": {i32, f32, i32, i32, i32, I, I, cuda.Float64Param, cuda.Float64Param, I}, // uniforms: float64 as int32 pairs
		"vlm_zero_f32":     {f32, I},
		"vlm_add_f32":      {f32, f32, I},
		"vlm_lse_mass_f32": {i32, f32, f32, i32, I, I, I, I, I, I}, // acc: float64 as int32 pairs
	}
	for _, m := range kernels.Modules() {
		mod, err := b.LoadModule("vlm/"+m.Name, m.PTX)
		if err != nil {
			return nil, err
		}
		for name, sig := range sigs {
			if !mod.Has(name) {
				continue
			}
			if o.k[name], err = mod.Kernel(name, sig...); err != nil { // a stale declaration here
				return nil, err
			}
		}
	}
	for name := range sigs {
		if o.k[name] == nil {
			return nil, tensor.Errorf(tensor.ErrDevice, "vlm.NewCUDAOps", "", "kernel %s not found in the embedded modules", name)
		}
	}
	return o, nil
}

// Backend returns the cuda.Backend.
func (o *CUDAOps) Backend() tensor.Backend { return o.b }

// need checks that t holds at least n elements (the kernels trust their sizes).
func need(op string, names []string, ts []*tensor.Tensor, ns []int) error {
	for i, t := range ts {
		if t == nil {
			return tensor.Errorf(tensor.ErrShape, op, names[i], "is nil")
		}
		if t.Len() < ns[i] {
			return tensor.Errorf(tensor.ErrShape, op, names[i], "has %d elements, needs %d", t.Len(), ns[i])
		}
	}
	return nil
}

// grid1 is the launch of a grid-stride kernel over n items (at least one block).
func grid1(n int) cuda.LaunchConfig {
	const block = 256
	g := min(max(1, (n+block-1)/block), 4096)
	return cuda.LaunchConfig{Grid: cuda.Dim3{X: g}, Block: cuda.Dim3{X: block}}
}

func (o *CUDAOps) run(name string, items int, args ...any) error {
	if items == 0 {
		return nil
	}
	return o.k[name].Launch(grid1(items), args...)
}

// Sample draws one token per row from logits [rows, V] into out [rows] int32 on the device,
// with the host sampler's temperature, top-p and top-k rules and the uniform of
// SampleBits(seed, row, step) (one thread per row; see kernels/sample.cu). Only the token ids
// need to come back to the host.
func (o *CUDAOps) Sample(out, logits *tensor.Tensor, rows int, temperature, topP float64, topK int, seed uint64, step int) error {
	const op = "vlm.CUDAOps.Sample"
	v := o.Config.Vocab
	if err := need(op, []string{"out", "logits"}, []*tensor.Tensor{out, logits}, []int{rows, rows * v}); err != nil {
		return err
	}
	return o.sample(rows, func(probs, order *tensor.Tensor) error {
		return o.run("vlm_sample_f32", rows, out, logits, probs, order, rows, v, temperature, topP, topK, int(seed), step)
	})
}

// sample runs launch with the sampler kernels' scratch: probabilities (one float64 per logit,
// as int32 pairs) and the sort order, [rows, V] each.
func (o *CUDAOps) sample(rows int, launch func(probs, order *tensor.Tensor) error) error {
	if rows == 0 {
		return nil
	}
	v := o.Config.Vocab
	probs, err := tensor.New(o.b, tensor.Int32, 2*rows*v)
	if err != nil {
		return err
	}
	defer probs.Release()
	order, err := tensor.New(o.b, tensor.Int32, rows*v)
	if err != nil {
		return err
	}
	defer order.Release()
	return launch(probs, order)
}

// SampleUniform is Sample with row r's uniform given in uniforms [2·rows] int32 (the bits of
// one float64 per row, in [0, 1); unread when greedy): a rollout on the device then draws with
// the host's per-row random sources and picks the host sampler's tokens.
func (o *CUDAOps) SampleUniform(out, logits *tensor.Tensor, rows int, temperature, topP float64, topK int, uniforms *tensor.Tensor) error {
	const op = "vlm.CUDAOps.SampleUniform"
	v := o.Config.Vocab
	if err := need(op, []string{"out", "logits", "uniforms"}, []*tensor.Tensor{out, logits, uniforms}, []int{rows, rows * v, 2 * rows}); err != nil {
		return err
	}
	return o.sample(rows, func(probs, order *tensor.Tensor) error {
		return o.run("vlm_sample_u_f32", rows, out, logits, probs, order, uniforms, rows, v, temperature, topP, topK)
	})
}

// LSEMass adds one block's response attention to acc [b, 2+2·groups] float64 (stored as an
// int32 tensor of twice the length, each value little-endian low word first) from the text
// queries' log-sum-exps over all their keys (lse) and over their row's image keys (lseImg),
// both [b·l, H]; span [b, 2] int32 holds each row's prompt length (BOS included) and response
// length, trusted to fit l (Activations.ResponseAttention checks them on the host). One thread
// per row runs the host's attentionMass loop in float64.
func (o *CUDAOps) LSEMass(acc, lse, lseImg, span *tensor.Tensor, b, l, group, groups int) error {
	const op = "vlm.CUDAOps.LSEMass"
	c := o.Config
	if err := need(op, []string{"acc", "lse", "lseImg", "span"}, []*tensor.Tensor{acc, lse, lseImg, span},
		[]int{2 * b * (2 + 2*groups), b * l * c.Heads, b * l * c.Heads, 2 * b}); err != nil {
		return err
	}
	if group < 0 || group >= groups {
		return tensor.Errorf(tensor.ErrParam, op, "group", "%d is outside [0, %d)", group, groups)
	}
	return o.run("vlm_lse_mass_f32", b, acc, lse, lseImg, span, b, l, c.Heads, c.Patches(), group, groups)
}

// AdamWStep holds the scalars of one AdamW step, computed on the host as the trainer's AdamW
// computes them: Beta1, Beta2, StepSize = lr/(1-β1^t), InvSqrtBC2 = 1/√(1-β2^t), Eps, and
// Shrink = 1 - lr·wd for a decayed parameter (1 otherwise), all rounded to float32.
type AdamWStep struct {
	Beta1, Beta2, StepSize, InvSqrtBC2, Eps, Shrink float32
}

// AdamW updates w, m and v [n] in place from g on the device, elementwise as the trainer's
// AdamW.Step (same float32 operations, float64 square root: its bits).
func (o *CUDAOps) AdamW(w, g, m, v *tensor.Tensor, n int, s AdamWStep) error {
	if err := need("vlm.CUDAOps.AdamW", []string{"w", "g", "m", "v"}, []*tensor.Tensor{w, g, m, v}, []int{n, n, n, n}); err != nil {
		return err
	}
	return o.run("vlm_adamw_f32", n, w, g, m, v, n, s.Beta1, s.Beta2, s.StepSize, s.InvSqrtBC2, s.Eps, s.Shrink)
}

// GradNorm returns the global L2 norm of gs (float64 squares summed per tensor on the device in
// a fixed tree, the tensors' sums added in order on the host: one 8-byte scalar per tensor
// crosses). A NaN or Inf norm is the non-finite check's answer; the caller skips the step.
func (o *CUDAOps) GradNorm(gs []*tensor.Tensor) (float64, error) {
	if len(gs) == 0 {
		return 0, nil
	}
	out, err := tensor.New(o.b, tensor.Int32, 2*len(gs))
	if err != nil {
		return 0, err
	}
	defer out.Release()
	for i, g := range gs {
		slot, err := out.Rows(2*i, 2*i+2)
		if err != nil {
			return 0, err
		}
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 256}}
		if err := o.k["vlm_sumsq_f32"].Launch(cfg, slot, g, g.Len()); err != nil {
			return 0, err
		}
	}
	h, err := tensor.To(tensor.CPU(), out)
	if err != nil {
		return 0, err
	}
	bits, _ := h.Int32s()
	var sum float64
	for i := range gs {
		sum += math.Float64frombits(uint64(uint32(bits[2*i])) | uint64(uint32(bits[2*i+1]))<<32)
	}
	return math.Sqrt(sum), nil
}

// ClipGrads scales every gradient by maxNorm/(norm+1e-6) when norm > maxNorm > 0, as the
// trainer's ClipGradNorm does after measuring the norm.
func (o *CUDAOps) ClipGrads(gs []*tensor.Tensor, norm, maxNorm float64) error {
	if !(maxNorm > 0 && norm > maxNorm) || math.IsInf(norm, 0) {
		return nil
	}
	s := float32(maxNorm / (norm + 1e-6))
	for _, g := range gs {
		if err := o.run("vlm_scale_f32", g.Len(), g, g.Len(), s); err != nil {
			return err
		}
	}
	return nil
}

// Zero sets the first n values of x to zero (the gradients' ZeroGrad, with no upload).
func (o *CUDAOps) Zero(x *tensor.Tensor, n int) error {
	if err := need("vlm.CUDAOps.Zero", []string{"x"}, []*tensor.Tensor{x}, []int{n}); err != nil {
		return err
	}
	return o.run("vlm_zero_f32", n, x, n)
}

// Scale multiplies the first n values of x by s (float32).
func (o *CUDAOps) Scale(x *tensor.Tensor, n int, s float32) error {
	if err := need("vlm.CUDAOps.Scale", []string{"x"}, []*tensor.Tensor{x}, []int{n}); err != nil {
		return err
	}
	return o.run("vlm_scale_f32", n, x, n, s)
}

// Add adds g to acc elementwise in float32 (acc += g over n values): the in-order sum of
// micro-batch gradients that the trainer otherwise runs on the host.
func (o *CUDAOps) Add(acc, g *tensor.Tensor, n int) error {
	if err := need("vlm.CUDAOps.Add", []string{"acc", "g"}, []*tensor.Tensor{acc, g}, []int{n, n}); err != nil {
		return err
	}
	return o.run("vlm_add_f32", n, acc, g, n)
}

// Close releases nothing any more (the modules live as long as the backend); it is kept for
// callers that pair NewCUDAOps with Close.
func (o *CUDAOps) Close() error { return nil }
