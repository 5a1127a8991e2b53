//go:build cuda

package cuda

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// The transformer op families of package tensor (issue 21): GEMMs through cuBLAS (cublas.go),
// the others with kernels/nn.cu and kernels/attention.cu. The entry points have validated
// every tensor; these run on the backend's thread.
var (
	_ tensor.MatMulKernel     = deviceKernels{}
	_ tensor.LinearKernel     = deviceKernels{}
	_ tensor.NormKernel       = deviceKernels{}
	_ tensor.RoPEKernel       = deviceKernels{}
	_ tensor.ActivationKernel = deviceKernels{}
	_ tensor.ArithKernel      = deviceKernels{}
	_ tensor.EmbeddingKernel  = deviceKernels{}
	_ tensor.OptimKernel      = deviceKernels{}
)

func f64Arg(v float64) arg { return arg(math.Float64bits(v)) }

// leading returns the number of matrices of t [..., r, c] (the product of its leading
// dimensions; 1 for a matrix).
func leading(t *tensor.Tensor) int {
	n := 1
	for _, d := range t.Shape()[:t.Rank()-2] {
		n *= d
	}
	return n
}

// operand returns t as a GEMM operand. When t is bfloat16 and other is float32 (cuBLAS takes
// one input type), it is first widened to float32 into scratch at byte offset off.
func (b *Backend) operand(op string, t *tensor.Tensor, p cu.DevicePtr, other tensor.DType, trans bool, stride int64, off int64) (gemmOperand, error) {
	o := gemmOperand{p: p, dtype: t.DType(), trans: trans, stride: stride}
	if o.dtype == other || o.dtype == tensor.Float32 {
		return o, nil
	}
	n := t.Len()
	s, err := b.scratchPtr(op, off+int64(n)*4)
	if err != nil {
		return o, err
	}
	if err := b.elementwise(op, "linear_widen_fwd_bf16", n, ptrArg(s+cu.DevicePtr(off)), ptrArg(p), intArg(n)); err != nil {
		return o, err
	}
	o.p, o.dtype = s+cu.DevicePtr(off), tensor.Float32
	return o, nil
}

// MatMul is tensor.MatMul through cublasGemmEx (one product over all rows when b is shared and
// a is not transposed) or cublasGemmStridedBatchedEx (b's stride 0 when shared).
func (b deviceKernels) MatMul(c, a, bm *tensor.Tensor, o tensor.MatMulOptions) error {
	const op = "tensor.MatMul"
	m, k := a.Dim(-2), a.Dim(-1)
	if o.TransA {
		m, k = k, m
	}
	n := bm.Dim(-1)
	if o.TransB {
		n = bm.Dim(-2)
	}
	batch := leading(a)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"c", "a", "b"}, c, a, bm)
		if err != nil {
			return err
		}
		sb := int64(0)
		if bm.Rank() > 2 {
			sb = int64(k) * int64(n)
		}
		// Both operands may need widening: a's copy first in scratch, b's after it.
		ga, err := b.operand(op, a, p[1], bm.DType(), o.TransA, int64(m)*int64(k), 0)
		if err != nil {
			return err
		}
		gb, err := b.operand(op, bm, p[2], a.DType(), o.TransB, sb, int64(a.Len())*4)
		if err != nil {
			return err
		}
		if bm.Rank() == 2 && !o.TransA {
			return b.gemm(op, 1, batch*m, n, k, ga, gb, p[0], o.Accumulate)
		}
		return b.gemm(op, batch, m, n, k, ga, gb, p[0], o.Accumulate)
	})
}

// deviceWeight is the CUDA layout of a PackedWeight: none, because cuBLAS reads the Hugging Face
// layout [N, K] transposed in place (CUBLAS_OP_T); nothing is copied or transposed per call.
type deviceWeight struct{}

// PackWeight keeps w as it is (see deviceWeight).
func (b deviceKernels) PackWeight(w *tensor.Tensor) (any, error) { return deviceWeight{}, nil }

// Linear is y = x·Wᵀ (+ bias) as one GEMM over all rows, then a bias kernel.
func (b deviceKernels) Linear(y, x *tensor.Tensor, w *tensor.PackedWeight, bias *tensor.Tensor) error {
	const op = "tensor.Linear"
	wt := w.Weight()
	n, k := wt.Dim(0), wt.Dim(1)
	rows := rowsOf(y)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"y", "x", "w", "bias"}, y, x, wt, bias)
		if err != nil {
			return err
		}
		gx, err := b.operand(op, x, p[1], wt.DType(), false, 0, 0)
		if err != nil {
			return err
		}
		gw, err := b.operand(op, wt, p[2], x.DType(), true, 0, int64(x.Len())*4)
		if err != nil {
			return err
		}
		if err := b.gemm(op, 1, rows, n, k, gx, gw, p[0], false); err != nil {
			return err
		}
		if bias == nil {
			return nil
		}
		return b.elementwise(op, "linear_bias_fwd_f32", rows*n, ptrArg(p[0]), ptrArg(p[3]), intArg(rows), intArg(n))
	})
}

// LinearBackward is dx = dy·W, dW (+)= dyᵀ·x (two GEMMs) and the bias gradient's column sums
// (one thread per column, rows in order).
func (b deviceKernels) LinearBackward(out tensor.LinearGradOut, in tensor.LinearGrad) error {
	const op = "tensor.LinearBackward"
	wt := in.Weight.Weight()
	n, k := wt.Dim(0), wt.Dim(1)
	rows := in.DY.Len() / max(1, n)
	if n == 0 {
		rows = in.X.Len() / max(1, k)
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"DX", "DWeight", "DBias", "DY", "X", "Weight"}, out.DX, out.DWeight, out.DBias, in.DY, in.X, wt)
		if err != nil {
			return err
		}
		gdy := gemmOperand{p: p[3], dtype: tensor.Float32}
		if out.DX != nil {
			gw, err := b.operand(op, wt, p[5], tensor.Float32, false, 0, 0)
			if err != nil {
				return err
			}
			if err := b.gemm(op, 1, rows, k, n, gdy, gw, p[0], false); err != nil {
				return err
			}
		}
		if out.DWeight != nil {
			gx, err := b.operand(op, in.X, p[4], tensor.Float32, false, 0, 0)
			if err != nil {
				return err
			}
			gdyT := gdy
			gdyT.trans = true
			if err := b.gemm(op, 1, n, k, rows, gdyT, gx, p[1], in.Accumulate); err != nil {
				return err
			}
		}
		if out.DBias != nil && n > 0 {
			return b.launch(op, "linear_colsum_bwd_f32", ceilDiv(n, blockSize), 1, blockSize, 0,
				ptrArg(p[2]), ptrArg(p[3]), intArg(rows), intArg(n), boolArg(in.Accumulate))
		}
		return nil
	})
}

func boolArg(v bool) arg {
	if v {
		return 1
	}
	return 0
}

// rowsOf returns the number of rows of t viewed as [rows, its last dimension].
func rowsOf(t *tensor.Tensor) int {
	if d := t.Dim(-1); d > 0 {
		return t.Len() / d
	}
	return 0
}

// normParams returns the device addresses of a norm's parameters (names; nil ones 0) as
// float32: a float32 tensor's own, or a bfloat16 one widened into scratch from byte offset off
// on (the norm kernels read float32 weights; the parameters are [D], so the copies are small).
// The scratch is sized once for all of them, so that none is freed by a later growth.
func (b *Backend) normParams(op string, off int64, names []string, ps ...*tensor.Tensor) ([]cu.DevicePtr, error) {
	out, err := b.ptrs(op, names, ps...)
	if err != nil {
		return nil, err
	}
	end := off
	for _, t := range ps {
		if t != nil && t.DType() == tensor.BFloat16 {
			end += int64(t.Len()) * 4
		}
	}
	if end == off {
		return out, nil
	}
	s, err := b.scratchPtr(op, end)
	if err != nil {
		return nil, err
	}
	for i, t := range ps {
		if t == nil || t.DType() != tensor.BFloat16 {
			continue
		}
		dst := s + cu.DevicePtr(off)
		if err := b.elementwise(op, "linear_widen_fwd_bf16", t.Len(), ptrArg(dst), ptrArg(out[i]), intArg(t.Len())); err != nil {
			return nil, err
		}
		out[i], off = dst, off+int64(t.Len())*4
	}
	return out, nil
}

// RMSNorm is one block per row (the sum of squares in float64, a fixed tree).
func (b deviceKernels) RMSNorm(y, x, w *tensor.Tensor, eps float64) error {
	return b.normForward("tensor.RMSNorm", "norm_rms_fwd_"+dtypeSuffix(x.DType()), y, nil, nil, x, w, nil, eps)
}

// LayerNorm is one block per row (mean and variance in float64).
func (b deviceKernels) LayerNorm(y, x, w, bias *tensor.Tensor, eps float64) error {
	return b.normForward("tensor.LayerNorm", "norm_layer_fwd_"+dtypeSuffix(x.DType()), y, nil, nil, x, w, bias, eps)
}

// RMSNormStats is RMSNorm whose blocks also write their row's scale (tensor.NormStatsKernel).
func (b deviceKernels) RMSNormStats(y, rstd, x, w *tensor.Tensor, eps float64) error {
	return b.normForward("tensor.RMSNormStats", "norm_rms_fwd_"+dtypeSuffix(x.DType()), y, nil, rstd, x, w, nil, eps)
}

// LayerNormStats is LayerNorm whose blocks also write their row's mean and 1/σ.
func (b deviceKernels) LayerNormStats(y, mean, rstd, x, w, bias *tensor.Tensor, eps float64) error {
	return b.normForward("tensor.LayerNormStats", "norm_layer_fwd_"+dtypeSuffix(x.DType()), y, mean, rstd, x, w, bias, eps)
}

// normForward launches a norm's forward; mean (LayerNorm) and rstd may be nil (not written).
func (b deviceKernels) normForward(op, name string, y, mean, rstd, x, w, bias *tensor.Tensor, eps float64) error {
	rows, d := rowsOf(x), x.Dim(-1)
	if rows == 0 {
		return nil
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"y", "mean", "rstd", "x"}, y, mean, rstd, x)
		if err != nil {
			return err
		}
		wb, err := b.normParams(op, 0, []string{"w", "b"}, w, bias)
		if err != nil {
			return err
		}
		args := []arg{ptrArg(p[0])}
		if bias != nil { // LayerNorm
			args = append(args, ptrArg(p[1]))
		}
		args = append(args, ptrArg(p[2]), ptrArg(p[3]), ptrArg(wb[0]))
		if bias != nil {
			args = append(args, ptrArg(wb[1]))
		}
		return b.launch(op, name, rows, 1, blockSize, 0, append(args, intArg(d), f64Arg(eps))...)
	})
}

// normWeightCols is NW_COLS of nn.cu: the columns of the weight gradient per block.
const normWeightCols = 32

// RMSNormBackward: dx one block per row (keeping each row's scale), then dw with each column
// summed over the rows in order (a block per 32 columns, its warps loading 128 rows at a time).
func (b deviceKernels) RMSNormBackward(dx, dw *tensor.Tensor, in tensor.NormGrad) error {
	return b.normBackward("tensor.RMSNormBackward", "norm_rms_bwd_"+dtypeSuffix(in.X.DType()), dx, dw, nil, in)
}

// LayerNormBackward is RMSNormBackward's scheme with the mean, and db.
func (b deviceKernels) LayerNormBackward(dx, dw, db *tensor.Tensor, in tensor.NormGrad) error {
	return b.normBackward("tensor.LayerNormBackward", "norm_layer_bwd_"+dtypeSuffix(in.X.DType()), dx, dw, db, in)
}

func (b deviceKernels) normBackward(op, name string, dx, dw, db *tensor.Tensor, in tensor.NormGrad) error {
	rows, d := rowsOf(in.X), in.X.Dim(-1)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dx", "dw", "db", "X", "DY"}, dx, dw, db, in.X, in.DY)
		if err != nil {
			return err
		}
		// Scratch: each row's statistics, then a bfloat16 weight widened (256-byte aligned).
		statsBytes := (int64(max(1, rows))*8 + 255) &^ 255
		w, err := b.normParams(op, statsBytes, []string{"Weight"}, in.Weight)
		if err != nil {
			return err
		}
		stats, err := b.scratchPtr(op, statsBytes)
		if err != nil {
			return err
		}
		if rows > 0 {
			if err := b.launch(op, name, rows, 1, blockSize, 0, ptrArg(p[0]), ptrArg(stats), ptrArg(p[3]), ptrArg(w[0]),
				ptrArg(p[4]), intArg(d), f64Arg(in.Eps)); err != nil {
				return err
			}
		}
		if d == 0 {
			return nil
		}
		return b.launch(op, "norm_weight_bwd_"+dtypeSuffix(in.X.DType()), ceilDiv(d, normWeightCols), 1, blockSize, 0, ptrArg(p[1]), ptrArg(p[2]),
			ptrArg(stats), ptrArg(p[3]), ptrArg(p[4]), intArg(rows), intArg(d), boolArg(in.Accumulate))
	})
}

// RoPE: the frequencies (cfg.Frequencies when given, else θ's) and the section of each are
// computed on the host as the reference computes them (float32 roundings included) and
// uploaded; a block per token (grid-stride), a thread per frequency over the heads.
func (b deviceKernels) RoPE(y, x, positions *tensor.Tensor, cfg tensor.RoPEConfig, inverse bool) error {
	const op = "tensor.RoPE"
	t, h, d := x.Dim(0), x.Dim(1), x.Dim(2)
	half := d / 2
	if t*h*half == 0 {
		return nil
	}
	tables := make([]uint32, 2*half) // freq (float32 bits), then sec
	for i, f := range nnref.RoPEGivenFrequencies[float32](d, cfg.Theta, cfg.Frequencies) {
		tables[i] = math.Float32bits(f)
	}
	for i, s := range nnref.RoPESections(half, cfg.Sections) {
		tables[half+i] = uint32(s)
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"y", "x", "positions"}, y, x, positions)
		if err != nil {
			return err
		}
		s, err := b.scratchPtr(op, int64(len(tables))*4)
		if err != nil {
			return err
		}
		if err := b.upload(op, s, unsafe.Pointer(&tables[0]), len(tables)*4); err != nil {
			return err
		}
		return b.launch(op, "rope_fwd_"+dtypeSuffix(x.DType()), min(t, b.sms*32), 1, blockSize, 0, ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(s),
			ptrArg(s+cu.DevicePtr(half*4)), intArg(t), intArg(h), intArg(d), boolArg(inverse))
	})
}

// actKind is the kernels' number of an activation (nnref.Act's order).
func actKind(a tensor.Activation) int {
	switch a {
	case tensor.GELU:
		return 1
	case tensor.GELUTanh:
		return 2
	case tensor.QuickGELU:
		return 3
	}
	return 0 // SiLU
}

// Activate evaluates the activation in float64 per element, as the reference.
func (b deviceKernels) Activate(y, x *tensor.Tensor, a tensor.Activation) error {
	n := x.Len()
	return b.elementwiseOp("tensor.Activate", "act_fwd_"+dtypeSuffix(x.DType()), []*tensor.Tensor{y, x}, n, intArg(n), intArg(actKind(a)))
}

// ActivateBackward is dx = dy·a'(x), a' in float64.
func (b deviceKernels) ActivateBackward(dx *tensor.Tensor, in tensor.ActivationGrad) error {
	n := dx.Len()
	return b.elementwiseOp("tensor.ActivateBackward", "act_bwd_"+dtypeSuffix(dx.DType()), []*tensor.Tensor{dx, in.X, in.DY}, n, intArg(n), intArg(actKind(in.Activation)))
}

// SwiGLU is y = silu(gate)·up.
func (b deviceKernels) SwiGLU(y, gate, up *tensor.Tensor) error {
	n := y.Len()
	return b.elementwiseOp("tensor.SwiGLU", "act_swiglu_fwd_"+dtypeSuffix(y.DType()), []*tensor.Tensor{y, gate, up}, n, intArg(n))
}

// SwiGLUBackward writes both gradients in one pass.
func (b deviceKernels) SwiGLUBackward(dgate, dup *tensor.Tensor, in tensor.SwiGLUGrad) error {
	n := dgate.Len()
	return b.elementwiseOp("tensor.SwiGLUBackward", "act_swiglu_bwd_"+dtypeSuffix(dgate.DType()), []*tensor.Tensor{dgate, dup, in.Gate, in.Up, in.DY}, n, intArg(n))
}

// Axpby is y = alpha·x + beta·y in one pass (beta 0 does not read y, alpha 0 not x).
func (b deviceKernels) Axpby(y, x *tensor.Tensor, alpha, beta float32) error {
	n := y.Len()
	return b.elementwiseOp("tensor.Axpby", "act_axpby_fwd_f32", []*tensor.Tensor{y, x}, n, intArg(n), f32Arg(alpha), f32Arg(beta))
}

// Mul is y = a·b.
func (b deviceKernels) Mul(y, a, bt *tensor.Tensor) error {
	n := y.Len()
	return b.elementwiseOp("tensor.Mul", "act_mul_fwd_f32", []*tensor.Tensor{y, a, bt}, n, intArg(n))
}

// elementwiseOp launches a grid-stride kernel over count elements whose parameters are the
// tensors' addresses (nil: 0), then extra.
func (b deviceKernels) elementwiseOp(op, name string, ts []*tensor.Tensor, count int, extra ...arg) error {
	if count == 0 {
		return nil
	}
	return b.do(op, func() error {
		args := make([]arg, 0, len(ts)+len(extra))
		for _, t := range ts {
			p, err := b.ptrOf(op, "tensors", t)
			if err != nil {
				return err
			}
			args = append(args, ptrArg(p))
		}
		return b.elementwise(op, name, count, append(args, extra...)...)
	})
}

// gatherSuffix names the gather kernel of rows of dtype y from a table of dtype table: "f32",
// "bf16" (a copy), or "bf16_f32" (a float32 table rounded into bfloat16 rows).
func gatherSuffix(y, table tensor.DType) string {
	if y == tensor.BFloat16 && table == tensor.Float32 {
		return "bf16_f32"
	}
	return dtypeSuffix(y)
}

// Embedding gathers rows (ids were checked on the host by the entry point).
func (b deviceKernels) Embedding(y, table, ids *tensor.Tensor) error {
	n, d := ids.Len(), table.Dim(1)
	return b.elementwiseOp("tensor.Embedding", "embedding_gather_fwd_"+gatherSuffix(y.DType(), table.DType()), []*tensor.Tensor{y, table, ids}, n*d, intArg(n), intArg(d))
}

// EmbeddingBackward zeroes dtable (unless accumulating), then scatter-adds with one thread per
// column, the ids in order: repeated ids add up deterministically, without atomics.
func (b deviceKernels) EmbeddingBackward(dtable *tensor.Tensor, in tensor.EmbeddingGrad) error {
	const op = "tensor.EmbeddingBackward"
	n, d := in.IDs.Len(), dtable.Dim(1)
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dtable", "IDs", "DY"}, dtable, in.IDs, in.DY)
		if err != nil {
			return err
		}
		if !in.Accumulate && dtable.Len() > 0 {
			if err := cu.MemsetD8Async(p[0], 0, int64(dtable.Len())*4, b.stream); err != nil {
				return devErr(op, "cuMemsetD8Async", "", err)
			}
		}
		if n == 0 || d == 0 {
			return nil
		}
		return b.launch(op, "embedding_scatter_bwd_"+dtypeSuffix(in.DY.DType()), ceilDiv(d, blockSize), 1, blockSize, 0,
			ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(n), intArg(d))
	})
}

// AdamWStep is one pass over the parameter with the scalars computed on the host as
// nnref.AdamW computes them; the bfloat16 copy is written in the same pass.
func (b deviceKernels) AdamWStep(p tensor.AdamWParams, step int, cfg tensor.AdamWConfig) error {
	const op = "tensor.AdamWStep"
	n := p.Param.Len()
	c := nnref.NewAdamWScalars(step, cfg.LR, cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay)
	return b.elementwiseOp(op, "optim_adamw_fwd_f32", []*tensor.Tensor{p.Param, p.ParamBF16, p.ExpAvg, p.ExpAvgSq, p.Grad}, n,
		intArg(n), f32Arg(c.Decay), f32Arg(c.W1), f32Arg(c.B2), f32Arg(c.W2), f32Arg(c.BC2), f32Arg(c.StepSize), f32Arg(c.Eps))
}

// sumSquaresChunk is the elements per block of SumSquares: the split depends only on the
// length, so the sum does not change from run to run.
const sumSquaresChunk = 1 << 14

// SumSquares sums x² in float64: per-chunk block trees on the device, the chunks in order on
// the host.
func (b deviceKernels) SumSquares(t *tensor.Tensor) (float64, error) {
	const op = "tensor.GradNorm"
	n := t.Len()
	if n == 0 {
		return 0, nil
	}
	g := ceilDiv(n, sumSquaresChunk)
	parts := make([]float64, g)
	err := b.do(op, func() error {
		p, err := b.ptrOf(op, "grads", t)
		if err != nil {
			return err
		}
		s, err := b.scratchPtr(op, int64(g)*8)
		if err != nil {
			return err
		}
		if err := b.launch(op, "optim_sumsq_fwd_f32", g, 1, blockSize, 0, ptrArg(s), ptrArg(p), intArg(n), intArg(sumSquaresChunk)); err != nil {
			return err
		}
		return b.download(op, unsafe.Pointer(&parts[0]), s, g*8)
	})
	var sum float64
	for _, v := range parts {
		sum += v
	}
	return sum, err
}

// Scale multiplies t by c in place.
func (b deviceKernels) Scale(t *tensor.Tensor, c float32) error {
	n := t.Len()
	return b.elementwiseOp("tensor.ClipGradNorm", "optim_scale_fwd_f32", []*tensor.Tensor{t}, n, intArg(n), f32Arg(c))
}
