//go:build cuda

package vlm

import (
	"math"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm/kernels"
	"github.com/mtrl-go/mtrl/tensor"
)

// CUDAOps is the op set on a cuda.Backend: the kernels of package kernels (one .cu per layer),
// loaded with cuda.Backend.LoadModule and launched on the backend's stream. GEMMs are
// gemm.cu's tiled kernel, not cuBLAS: the CPU emulation of the driver (internal/cuemu), the
// only place these kernels run in CI, executes CUDA C kernels but not cuBLAS's closed binaries,
// and a kernel of our own keeps a fixed summation order (deterministic, and within a stated
// bound of the host's). Sums that the reference runs sequentially (LayerNorm rows, column
// sums, attention, embedding gradients) run sequentially here, one thread per output.
type CUDAOps struct {
	Config Config
	b      *cuda.Backend
	k      map[string]*cuda.Kernel
	dot    *tensor.Tensor // attention backward scratch [B, H, S], grown on demand
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
		"vlm_gemm_f32":              {f32, f32, f32, I, I, I, cuda.Int32Param, cuda.Int32Param, F},
		"vlm_layernorm_fwd_f32":     {f32, f32, f32, f32, f32, f32, I, I},
		"vlm_layernorm_bwd_dx_f32":  {f32, f32, f32, f32, f32, I, I},
		"vlm_layernorm_bwd_dgb_f32": {f32, f32, f32, f32, I, I},
		"vlm_add_bias_f32":          {f32, f32, I, I},
		"vlm_col_sum_f32":           {f32, f32, I, I},
		"vlm_gelu_fwd_f32":          {f32, f32, I},
		"vlm_gelu_bwd_f32":          {f32, f32, I},
		"vlm_attention_fwd_f32":     {f32, f32, f32, I, I, I, I, I, F},
		"vlm_attention_bwd_q_f32":   {f32, f32, f32, f32, f32, I, I, I, I, I, F},
		"vlm_attention_bwd_kv_f32":  {f32, f32, f32, f32, f32, I, I, I, I, I, F},
		"vlm_attention_mass_f32":    {i32, f32, i32, I, I, I, I, I, I}, // acc: float64 as int32 pairs
		"vlm_patch_embed_fwd_f32":   {f32, f32, f32, f32, I, I, I, I},
		"vlm_token_embed_fwd_f32":   {f32, i32, f32, f32, I, I, I, I, I},
		"vlm_patch_embed_bwd_f32":   {f32, f32, f32, I, I, I, I},
		"vlm_token_embed_bwd_f32":   {f32, f32, f32, i32, I, I, I, I, I},
		"vlm_text_rows_fwd_f32":     {f32, f32, I, I, I, I, I},
		"vlm_text_rows_bwd_f32":     {f32, f32, I, I, I, I, I},
		// probs is float64 scratch, passed as an int32 tensor of twice the length.
		"vlm_sample_f32":       {i32, f32, i32, i32, I, I, cuda.Float64Param, cuda.Float64Param, I, I, I},
		"vlm_adamw_f32":        {f32, f32, f32, f32, I, F, F, F, F, F, F},
		"vlm_sumsq_f32":        {i32, f32, I}, // out: one float64 as two int32
		"vlm_scale_f32":        {f32, I, F},
		"vlm_sample_u_f32":     {i32, f32, i32, i32, i32, I, I, cuda.Float64Param, cuda.Float64Param, I}, // uniforms: float64 as int32 pairs
		"vlm_kv_store_f32":     {f32, f32, f32, i32, I, I, I},
		"vlm_kv_attention_f32": {f32, f32, f32, f32, i32, I, I, I, I, I, F},
		"vlm_embed_at_f32":     {f32, i32, i32, f32, f32, I, I},
		"vlm_zero_f32":         {f32, I},
		"vlm_add_f32":          {f32, f32, I},
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

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func (o *CUDAOps) Gemm(c *tensor.Tensor, ta, tb bool, m, n, k int, a, b *tensor.Tensor, beta float32) error {
	if err := need("vlm.CUDAOps.Gemm", []string{"c", "a", "b"}, []*tensor.Tensor{c, a, b}, []int{m * n, m * k, k * n}); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	const tile = 16
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: (n + tile - 1) / tile, Y: (m + tile - 1) / tile}, Block: cuda.Dim3{X: tile * tile}}
	return o.k["vlm_gemm_f32"].Launch(cfg, c, a, b, m, n, k, b2i(ta), b2i(tb), beta)
}

func (o *CUDAOps) LayerNorm(h, xhat, rstd *tensor.Tensor, n, d int, x, g, b *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.LayerNorm", []string{"h", "xhat", "rstd", "x", "g", "b"},
		[]*tensor.Tensor{h, xhat, rstd, x, g, b}, []int{n * d, n * d, n, n * d, d, d}); err != nil {
		return err
	}
	return o.run("vlm_layernorm_fwd_f32", n, h, xhat, rstd, x, g, b, n, d)
}

func (o *CUDAOps) LayerNormBack(dx, dg, db *tensor.Tensor, n, d int, dh, xhat, rstd, g *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.LayerNormBack", []string{"dx", "dg", "db", "dh", "xhat", "rstd", "g"},
		[]*tensor.Tensor{dx, dg, db, dh, xhat, rstd, g}, []int{n * d, d, d, n * d, n * d, n, d}); err != nil {
		return err
	}
	if err := o.run("vlm_layernorm_bwd_dgb_f32", d, dg, db, dh, xhat, n, d); err != nil {
		return err
	}
	return o.run("vlm_layernorm_bwd_dx_f32", n, dx, dh, xhat, rstd, g, n, d)
}

func (o *CUDAOps) AddBias(y *tensor.Tensor, n, d int, b *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.AddBias", []string{"y", "b"}, []*tensor.Tensor{y, b}, []int{n * d, d}); err != nil {
		return err
	}
	return o.run("vlm_add_bias_f32", n*d, y, b, n, d)
}

func (o *CUDAOps) ColSum(db *tensor.Tensor, n, d int, dy *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.ColSum", []string{"db", "dy"}, []*tensor.Tensor{db, dy}, []int{d, n * d}); err != nil {
		return err
	}
	return o.run("vlm_col_sum_f32", d, db, dy, n, d)
}

func (o *CUDAOps) GELU(a *tensor.Tensor, n int, u *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.GELU", []string{"a", "u"}, []*tensor.Tensor{a, u}, []int{n, n}); err != nil {
		return err
	}
	return o.run("vlm_gelu_fwd_f32", n, a, u, n)
}

func (o *CUDAOps) GELUBack(da *tensor.Tensor, n int, u *tensor.Tensor) error {
	if err := need("vlm.CUDAOps.GELUBack", []string{"da", "u"}, []*tensor.Tensor{da, u}, []int{n, n}); err != nil {
		return err
	}
	return o.run("vlm_gelu_bwd_f32", n, da, u, n)
}

func (o *CUDAOps) Attention(ao, p *tensor.Tensor, b, s int, qkv *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.Attention", []string{"ao", "p", "qkv"}, []*tensor.Tensor{ao, p, qkv},
		[]int{b * s * c.Dim, b * c.Heads * s * s, b * s * 3 * c.Dim}); err != nil {
		return err
	}
	return o.run("vlm_attention_fwd_f32", b*c.Heads*s, ao, p, qkv, b, s, c.Dim, c.Heads, c.Patches(), attnScale(c))
}

func (o *CUDAOps) AttentionBack(dqkv *tensor.Tensor, b, s int, qkv, p, dao *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.AttentionBack", []string{"dqkv", "qkv", "p", "dao"}, []*tensor.Tensor{dqkv, qkv, p, dao},
		[]int{b * s * 3 * c.Dim, b * s * 3 * c.Dim, b * c.Heads * s * s, b * s * c.Dim}); err != nil {
		return err
	}
	rows := b * c.Heads * s
	if rows == 0 {
		return nil
	}
	if o.dot == nil || o.dot.Len() < rows {
		if o.dot != nil {
			_ = o.dot.Release()
		}
		t, err := tensor.New(o.b, tensor.Float32, rows)
		if err != nil {
			return err
		}
		o.dot = t
	}
	args := []any{dqkv, o.dot, qkv, p, dao, b, s, c.Dim, c.Heads, c.Patches(), attnScale(c)}
	if err := o.run("vlm_attention_bwd_q_f32", rows, args...); err != nil {
		return err
	}
	return o.run("vlm_attention_bwd_kv_f32", rows, args...)
}

// AttentionMass runs one thread per row: the rows' response queries are summed in the
// reference's order, so the device adds the host's float64 bits.
func (o *CUDAOps) AttentionMass(acc *tensor.Tensor, b, s, group, groups int, p, span *tensor.Tensor) error {
	const op = "vlm.CUDAOps.AttentionMass"
	c := o.Config
	if err := need(op, []string{"acc", "p", "span"}, []*tensor.Tensor{acc, p, span},
		[]int{2 * b * (2 + 2*groups), b * c.Heads * s * s, 2 * b}); err != nil {
		return err
	}
	if group < 0 || group >= groups {
		return tensor.Errorf(tensor.ErrParam, op, "group", "%d is outside [0, %d)", group, groups)
	}
	return o.run("vlm_attention_mass_f32", b, acc, p, span, b, s, c.Heads, c.Patches(), group, groups)
}

func (o *CUDAOps) PatchEmbed(x *tensor.Tensor, b, s int, e, pb, pos *tensor.Tensor) error {
	c := o.Config
	d, np := c.Dim, c.Patches()
	if err := need("vlm.CUDAOps.PatchEmbed", []string{"x", "e", "pb", "pos"}, []*tensor.Tensor{x, e, pb, pos},
		[]int{b * s * d, b * np * d, d, np * d}); err != nil {
		return err
	}
	return o.run("vlm_patch_embed_fwd_f32", b*np*d, x, e, pb, pos, b, s, np, d)
}

// The token ids are trusted to lie in [0, Vocab): the model's entry points validate them on the
// host before they are uploaded or sampled on the device.
func (o *CUDAOps) TokenEmbed(x *tensor.Tensor, b, l, s int, tokens, emb, pos *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.TokenEmbed", []string{"x", "tokens", "emb", "pos"}, []*tensor.Tensor{x, tokens, emb, pos},
		[]int{b * s * c.Dim, b * l, c.Vocab * c.Dim, l * c.Dim}); err != nil {
		return err
	}
	return o.run("vlm_token_embed_fwd_f32", b*l*c.Dim, x, tokens, emb, pos, b, l, s, c.Patches(), c.Dim)
}

func (o *CUDAOps) PatchEmbedBack(dimg, dpos *tensor.Tensor, b, s int, dx *tensor.Tensor) error {
	c := o.Config
	d, np := c.Dim, c.Patches()
	if err := need("vlm.CUDAOps.PatchEmbedBack", []string{"dimg", "dpos", "dx"}, []*tensor.Tensor{dimg, dpos, dx},
		[]int{b * np * d, np * d, b * s * d}); err != nil {
		return err
	}
	return o.run("vlm_patch_embed_bwd_f32", np*d, dimg, dpos, dx, b, s, np, d)
}

func (o *CUDAOps) TokenEmbedBack(demb, dpos *tensor.Tensor, b, l, s int, dx, tokens *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.TokenEmbedBack", []string{"demb", "dpos", "dx", "tokens"}, []*tensor.Tensor{demb, dpos, dx, tokens},
		[]int{c.Vocab * c.Dim, l * c.Dim, b * s * c.Dim, b * l}); err != nil {
		return err
	}
	return o.run("vlm_token_embed_bwd_f32", c.Dim, demb, dpos, dx, tokens, b, l, s, c.Patches(), c.Dim)
}

func (o *CUDAOps) TextRows(xt *tensor.Tensor, b, l, s int, x *tensor.Tensor) error {
	d := o.Config.Dim
	if err := need("vlm.CUDAOps.TextRows", []string{"xt", "x"}, []*tensor.Tensor{xt, x}, []int{b * l * d, b * s * d}); err != nil {
		return err
	}
	return o.run("vlm_text_rows_fwd_f32", b*l*d, xt, x, b, l, s, o.Config.Patches(), d)
}

func (o *CUDAOps) TextRowsBack(dx *tensor.Tensor, b, l, s int, dxt *tensor.Tensor) error {
	d := o.Config.Dim
	if err := need("vlm.CUDAOps.TextRowsBack", []string{"dx", "dxt"}, []*tensor.Tensor{dx, dxt}, []int{b * s * d, b * l * d}); err != nil {
		return err
	}
	return o.run("vlm_text_rows_bwd_f32", b*s*d, dx, dxt, b, l, s, o.Config.Patches(), d)
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

// KVStore writes the keys and values of n new tokens from qkv [n, 3D] into one layer's cache
// kc, vc [B, stride, D] at (row, position) = meta[2i], meta[2i+1] (int32, trusted: the
// generator computes them).
func (o *CUDAOps) KVStore(kc, vc *tensor.Tensor, n, stride int, meta, qkv *tensor.Tensor) error {
	d := o.Config.Dim
	if err := need("vlm.CUDAOps.KVStore", []string{"kc", "vc", "meta", "qkv"}, []*tensor.Tensor{kc, vc, meta, qkv},
		[]int{stride * d, stride * d, 2 * n, n * 3 * d}); err != nil {
		return err
	}
	return o.run("vlm_kv_store_f32", n*d, kc, vc, qkv, meta, n, stride, d)
}

// KVAttention writes ao [n, D]: each new token's attention over its row's cached keys and
// values (positions 0..keyLimit of its own, which KVStore wrote first).
func (o *CUDAOps) KVAttention(ao *tensor.Tensor, n, stride int, meta, qkv, kc, vc *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.KVAttention", []string{"ao", "meta", "qkv", "kc", "vc"}, []*tensor.Tensor{ao, meta, qkv, kc, vc},
		[]int{n * c.Dim, 2 * n, n * 3 * c.Dim, stride * c.Dim, stride * c.Dim}); err != nil {
		return err
	}
	return o.run("vlm_kv_attention_f32", n*c.Heads, ao, qkv, kc, vc, meta, n, stride, c.Dim, c.Heads, c.Patches(), attnScale(c))
}

// EmbedAt writes x [n, D]: row i is emb[tokens[i]] + pos[tpos[i]] (ids and text positions
// trusted), the input of a decode step.
func (o *CUDAOps) EmbedAt(x *tensor.Tensor, n int, tokens, tpos, emb, pos *tensor.Tensor) error {
	c := o.Config
	if err := need("vlm.CUDAOps.EmbedAt", []string{"x", "tokens", "tpos", "emb", "pos"}, []*tensor.Tensor{x, tokens, tpos, emb, pos},
		[]int{n * c.Dim, n, n, c.Vocab * c.Dim, c.MaxLen * c.Dim}); err != nil {
		return err
	}
	return o.run("vlm_embed_at_f32", n*c.Dim, x, tokens, tpos, emb, pos, n, c.Dim)
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

// Close releases the op set's scratch memory (the modules live as long as the backend).
func (o *CUDAOps) Close() error {
	if o.dot == nil {
		return nil
	}
	err := o.dot.Release()
	o.dot = nil
	return err
}
