//go:build cuda

package cuda

import (
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// The fused LM head (tensor.LMHeadLogProbs and its backward): the logits exist one vocabulary
// chunk at a time, [rows, lmHeadChunk] float32 in the backend's scratch, written by cuBLAS and
// folded or differentiated by the lmhead_* kernels of kernels/logprob.cu.
var _ tensor.LMHeadKernel = deviceKernels{}

// lmHeadChunk is the vocabulary rows per chunk: the scratch holds rows·lmHeadChunk float32
// logits (32 KiB per row; 128 MiB for 4096 rows, against 2.3 GiB for the whole [4096, 151936]),
// wide enough that each chunk's GEMM runs near cuBLAS's peak. A variable so that the tests can
// make several chunks of a small vocabulary.
var lmHeadChunk = 8192

// lmHeadLogitBytes caps the chunk's logits for many rows: above 8192 rows the chunk narrows
// (to no less than 1024 vocabulary rows, a multiple of 256) so that they stay within 256 MiB;
// the GEMMs stay large along the rows.
const lmHeadLogitBytes = 256 << 20

// lmChunk returns the vocabulary rows per chunk for rows hidden states and vocabulary v.
func lmChunk(rows, v int) int {
	c := lmHeadChunk
	if rows > 0 && int64(rows)*int64(c)*4 > lmHeadLogitBytes {
		c = min(c, max(1024, lmHeadLogitBytes/(4*rows)&^255))
	}
	return max(1, min(v, c))
}

// lmScratch lays out the scratch of one LM head call: the logits chunk z at 0, then (256-byte
// aligned) the per-row state, the bfloat16 copy of a chunk's gradient, the hidden states
// widened to float32 and one chunk of the weight widened to float32, each when needed.
type lmScratch struct {
	z, state, dzb, hidden, wchunk int64
	end                           int64
}

func align256(n int64) int64 { return (n + 255) &^ 255 }

func newLMScratch(rows, chunk, d int, stateBytes int64, dzb, hidden, wchunk bool) lmScratch {
	var s lmScratch
	s.state = align256(int64(rows) * int64(chunk) * 4)
	end := align256(s.state + int64(rows)*stateBytes)
	if dzb {
		s.dzb, end = end, align256(end+int64(rows)*int64(chunk)*2)
	}
	if hidden {
		s.hidden, end = end, align256(end+int64(rows)*int64(d)*4)
	}
	if wchunk {
		s.wchunk, end = end, align256(end+int64(chunk)*int64(d)*4)
	}
	s.end = end
	return s
}

// lmOperands returns the hidden states and the weight chunk [c0, c1) as GEMM operands of one
// dtype: a bfloat16 one is read in place when the other is bfloat16 too (keepBF16), else
// from its float32 copy (the hidden states widened once by the caller, the chunk here).
type lmOperands struct {
	b                 *Backend
	op                string
	hidden, weight    *tensor.Tensor
	hp, wp, hw, wbase cu.DevicePtr // hidden, weight, widened hidden, widened chunk
	d                 int
	keepBF16          bool
}

func (o lmOperands) hiddenOp(trans bool) gemmOperand {
	if o.hidden.DType() == tensor.BFloat16 && !o.keepBF16 {
		return gemmOperand{p: o.hw, dtype: tensor.Float32, trans: trans}
	}
	return gemmOperand{p: o.hp, dtype: o.hidden.DType(), trans: trans}
}

func (o lmOperands) weightOp(c0, c1 int, trans bool) (gemmOperand, error) {
	dt := o.weight.DType()
	p := o.wp + cu.DevicePtr(int64(c0)*int64(o.d)*int64(dt.Size()))
	if dt == tensor.BFloat16 && !o.keepBF16 {
		n := (c1 - c0) * o.d
		if err := o.b.elementwise(o.op, "linear_widen_fwd_bf16", n, ptrArg(o.wbase), ptrArg(p), intArg(n)); err != nil {
			return gemmOperand{}, err
		}
		return gemmOperand{p: o.wbase, dtype: tensor.Float32, trans: trans}, nil
	}
	return gemmOperand{p: p, dtype: dt, trans: trans}, nil
}

// logits writes the chunk [c0, c1) of h·Wᵀ into z [rows, c1−c0].
func (o lmOperands) logits(rows, c0, c1 int, z cu.DevicePtr) error {
	gw, err := o.weightOp(c0, c1, true)
	if err != nil {
		return err
	}
	return o.b.gemm(o.op, 1, rows, c1-c0, o.d, o.hiddenOp(false), gw, z, false)
}

// widenHidden copies bfloat16 hidden states to float32 at o.hw when the GEMMs need them so.
func (o lmOperands) widenHidden() error {
	if o.hidden.DType() != tensor.BFloat16 || o.keepBF16 {
		return nil
	}
	n := o.hidden.Len()
	return o.b.elementwise(o.op, "linear_widen_fwd_bf16", n, ptrArg(o.hw), ptrArg(o.hp), intArg(n))
}

// LMHeadLogProbs computes each chunk's logits with one GEMM (bfloat16 inputs when hidden states
// and weight are both bfloat16, else float32; float32 compute), folds them into each row's
// running maximum, Σexp and Σexp·z (double across chunks) and the target's logit, and writes
// log-probs and entropies from those. Scratch: rows·chunk float32, 32 bytes per row, and the
// float32 copies of mixed-dtype inputs (the hidden states, or one chunk of the weight).
func (b deviceKernels) LMHeadLogProbs(logp, entropy *tensor.Tensor, in tensor.LMHeadInputs) error {
	const op = "tensor.LMHeadLogProbs"
	w := in.Weight.Weight()
	rows, d, v := rowsOf(in.Hidden), in.Hidden.Dim(-1), w.Dim(0)
	if rows == 0 {
		return nil
	}
	chunk := lmChunk(rows, v)
	same := in.Hidden.DType() == w.DType()
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"logp", "entropy", "Hidden", "Weight", "Targets"}, logp, entropy, in.Hidden, w, in.Targets)
		if err != nil {
			return err
		}
		ls := newLMScratch(rows, chunk, d, 32, false, !same && in.Hidden.DType() == tensor.BFloat16, !same && w.DType() == tensor.BFloat16)
		s, err := b.scratchPtr(op, ls.end)
		if err != nil {
			return err
		}
		o := lmOperands{b: b.Backend, op: op, hidden: in.Hidden, weight: w, hp: p[2], wp: p[3],
			hw: s + cu.DevicePtr(ls.hidden), wbase: s + cu.DevicePtr(ls.wchunk), d: d, keepBF16: same}
		if err := o.widenHidden(); err != nil {
			return err
		}
		state := s + cu.DevicePtr(ls.state)
		for c0 := 0; c0 < v; c0 += chunk {
			c1 := min(v, c0+chunk)
			if err := o.logits(rows, c0, c1, s); err != nil {
				return err
			}
			if err := b.launch(op, "lmhead_fold_fwd_f32", rows, 1, blockSize, 0, ptrArg(state), ptrArg(s),
				ptrArg(p[4]), intArg(c0), intArg(c1-c0), f32Arg(in.Temperature), boolArg(c0 == 0)); err != nil {
				return err
			}
		}
		return b.launch(op, "lmhead_finish_fwd_f32", ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(p[0]), ptrArg(p[1]), ptrArg(state), intArg(rows))
	})
}

// LMHeadBackward recomputes each chunk's logits (as the forward), turns them into the logits
// gradient in place (lse = z_y − logp per row from one dot product each, first), rounds it to
// bfloat16 when in.GradBF16, and adds its products into dhidden (dz·W_chunk, the first chunk
// overwriting) and dweight's chunk (dzᵀ·h, unless the head is frozen) with cuBLAS: in bfloat16
// when GradBF16 and both inputs are bfloat16, else in float32 from widened copies. Scratch:
// rows·chunk float32 (and as many bfloat16 on the bfloat16 path), 4 bytes per row, and the
// float32 copies of bfloat16 inputs (the hidden states, one chunk of the weight).
func (b deviceKernels) LMHeadBackward(dhidden, dweight *tensor.Tensor, in tensor.LMHeadGrad) error {
	const op = "tensor.LMHeadBackward"
	w := in.Weight.Weight()
	rows, d, v := rowsOf(in.Hidden), in.Hidden.Dim(-1), w.Dim(0)
	chunk := lmChunk(rows, v)
	hdt, wdt := in.Hidden.DType(), w.DType()
	bf16 := in.GradBF16 && hdt == tensor.BFloat16 && wdt == tensor.BFloat16
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dhidden", "dweight", "Hidden", "Weight", "Targets", "LogProbs", "Entropy", "DLogProbs", "DEntropy"},
			dhidden, dweight, in.Hidden, w, in.Targets, in.LogProbs, in.Entropy, in.DLogProbs, in.DEntropy)
		if err != nil {
			return err
		}
		if rows == 0 {
			if dweight != nil && !in.Accumulate && dweight.Len() > 0 {
				if err := cu.MemsetD8Async(p[1], 0, int64(dweight.Len())*4, b.stream); err != nil {
					return devErr(op, "cuMemsetD8Async", "", err)
				}
			}
			return nil
		}
		ls := newLMScratch(rows, chunk, d, 4, bf16, hdt == tensor.BFloat16 && !bf16, wdt == tensor.BFloat16 && !bf16)
		s, err := b.scratchPtr(op, ls.end)
		if err != nil {
			return err
		}
		o := lmOperands{b: b.Backend, op: op, hidden: in.Hidden, weight: w, hp: p[2], wp: p[3],
			hw: s + cu.DevicePtr(ls.hidden), wbase: s + cu.DevicePtr(ls.wchunk), d: d, keepBF16: bf16}
		if err := o.widenHidden(); err != nil {
			return err
		}
		// The target logits: from the inputs as they are, or the widened hidden states.
		lse := s + cu.DevicePtr(ls.state)
		th, tk := p[2], "lmhead_target_bwd_"+dtypeSuffix(hdt)
		switch {
		case hdt == tensor.BFloat16 && wdt == tensor.Float32:
			th, tk = o.hw, "lmhead_target_bwd_f32"
		case hdt == tensor.Float32 && wdt == tensor.BFloat16:
			tk = "lmhead_target_bwd_f32_bf16"
		}
		if err := b.launch(op, tk, rows, 1, blockSize, 0, ptrArg(lse), ptrArg(th), ptrArg(p[3]), ptrArg(p[4]),
			ptrArg(p[5]), intArg(d), f32Arg(in.Temperature)); err != nil {
			return err
		}
		// The logits are recomputed with the forward's operands (bfloat16 in place when both
		// inputs are), so that they match the ones logp came from.
		fwd := o
		fwd.keepBF16 = hdt == wdt
		dzb := cu.DevicePtr(0)
		if bf16 {
			dzb = s + cu.DevicePtr(ls.dzb)
		}
		for c0 := 0; c0 < v; c0 += chunk {
			c1 := min(v, c0+chunk)
			vc := c1 - c0
			gwT, err := fwd.weightOp(c0, c1, true)
			if err != nil {
				return err
			}
			if err := b.gemm(op, 1, rows, vc, d, fwd.hiddenOp(false), gwT, s, false); err != nil {
				return err
			}
			if err := b.launch(op, "lmhead_grad_bwd_f32", rows, ceilDiv(vc, 8*blockSize), blockSize, 0,
				ptrArg(s), ptrArg(dzb), ptrArg(lse), ptrArg(p[4]), ptrArg(p[6]), ptrArg(p[7]), ptrArg(p[8]),
				intArg(c0), intArg(vc), f32Arg(in.Temperature), boolArg(in.GradBF16)); err != nil {
				return err
			}
			gdz := gemmOperand{p: s, dtype: tensor.Float32}
			if bf16 {
				gdz = gemmOperand{p: dzb, dtype: tensor.BFloat16}
			}
			gw := gwT // the chunk the logits widened, when the products read it widened too
			gw.trans = false
			if gw.dtype != tensor.Float32 || wdt == tensor.Float32 || bf16 {
				if gw, err = o.weightOp(c0, c1, false); err != nil {
					return err
				}
			}
			if err := b.gemm(op, 1, rows, d, vc, gdz, gw, p[0], c0 > 0); err != nil {
				return err
			}
			if dweight == nil {
				continue
			}
			gdz.trans = true
			dw := p[1] + cu.DevicePtr(int64(c0)*int64(d)*4)
			if err := b.gemm(op, 1, vc, d, rows, gdz, o.hiddenOp(false), dw, in.Accumulate); err != nil {
				return err
			}
		}
		return nil
	})
}
