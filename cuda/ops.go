//go:build cuda

package cuda

import (
	"encoding/binary"
	"unsafe"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// The fused kernel interfaces this backend implements.
var (
	_ tensor.LogProbEntropyKernel      = (*Backend)(nil)
	_ tensor.MaskedReduceKernel        = (*Backend)(nil)
	_ tensor.TopPKernel                = (*Backend)(nil)
	_ divergence.PenaltyKernel         = (*Backend)(nil)
	_ divergence.PenaltyGradKernel     = (*Backend)(nil)
	_ divergence.PerceptionScoreKernel = (*Backend)(nil)
	_ divergence.RewardsKernel         = (*Backend)(nil)
)

func dtypeSuffix(d tensor.DType) string {
	if d == tensor.BFloat16 {
		return "bf16"
	}
	return "f32"
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// targetError reports the first out-of-range target (row) as the host kernel does.
func (b *Backend) targetError(op string, targets *tensor.Tensor, row int64, v int) error {
	var y int32
	p, err := b.ptrOf(op, "targets", targets)
	if err == nil {
		var buf [4]byte
		if e := cu.MemcpyDtoH(unsafe.Pointer(&buf[0]), p+cu.DevicePtr(row*4), 4); e == nil {
			y = int32(binary.LittleEndian.Uint32(buf[:]))
		}
	}
	return tensor.Errorf(tensor.ErrParam, op, "targets", "element %d is %d, outside the vocabulary [0, %d)", row, y, v)
}

// LogProbEntropy is the device kernel of tensor.LogProbEntropy (see the package doc): one read
// of the logits, split across blocks along V when there are fewer rows than the device has
// room for. A target outside [0, V) is an ErrParam error (its logp is NaN).
func (b *Backend) LogProbEntropy(logp, entropy, logits, targets *tensor.Tensor, temperature float32) error {
	const op = "tensor.LogProbEntropy"
	v := logits.Dim(-1)
	rows := logits.Len() / v
	if rows == 0 {
		return nil
	}
	sfx := dtypeSuffix(logits.DType())
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"logp", "entropy", "logits", "targets"}, logp, entropy, logits, targets)
		if err != nil {
			return err
		}
		// Enough blocks to fill the device (4 per SM), chunks of at least 4096 logits.
		splits := max(1, min(ceilDiv(4*b.sms, rows), v/4096, 65535))
		chunk := ceilDiv(v, splits)
		splits = ceilDiv(v, chunk)
		stats, err := b.scratchPtr(op, int64(rows)*int64(splits)*12)
		if err != nil {
			return err
		}
		if err := b.resetFlag(op); err != nil {
			return err
		}
		k1 := "logprob_stats_fwd_" + sfx
		if err := b.launch(op, k1, rows, splits, blockSize, 0,
			ptrArg(stats), ptrArg(p[2]), intArg(v), intArg(chunk), f32Arg(temperature)); err != nil {
			return err
		}
		k2 := "logprob_finish_fwd_" + sfx
		if err := b.launch(op, k2, ceilDiv(rows, blockSize), 1, blockSize, 0,
			ptrArg(p[0]), ptrArg(p[1]), ptrArg(b.aux+auxFlag), ptrArg(stats), ptrArg(p[2]), ptrArg(p[3]),
			intArg(rows), intArg(v), intArg(splits), f32Arg(temperature)); err != nil {
			return err
		}
		bad, err := b.readFlag(op, k2)
		if err != nil {
			return err
		}
		if bad >= 0 {
			return b.targetError(op, targets, bad, v)
		}
		return nil
	})
}

// LogProbEntropyBackward is the device kernel of tensor.LogProbEntropyBackward: one read of
// the logits and one write of dlogits (float32 or bfloat16, either logits dtype).
func (b *Backend) LogProbEntropyBackward(dlogits, logits, targets, logp, entropy, dlogp, dentropy *tensor.Tensor, temperature float32) error {
	const op = "tensor.LogProbEntropyBackward"
	v := logits.Dim(-1)
	rows := logits.Len() / v
	if rows == 0 {
		return nil
	}
	name := "logprob_entropy_bwd_" + dtypeSuffix(logits.DType())
	if dlogits.DType() != logits.DType() {
		name += "_" + dtypeSuffix(dlogits.DType())
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dlogits", "logits", "targets", "logp", "entropy", "dlogp", "dentropy"},
			dlogits, logits, targets, logp, entropy, dlogp, dentropy)
		if err != nil {
			return err
		}
		chunk := max(ceilDiv(v, max(1, ceilDiv(v, blockSize*16))), ceilDiv(v, 65535))
		chunks := ceilDiv(v, chunk)
		if err := b.resetFlag(op); err != nil {
			return err
		}
		if err := b.launch(op, name, rows, chunks, blockSize, 0,
			ptrArg(p[0]), ptrArg(b.aux+auxFlag), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), ptrArg(p[4]),
			ptrArg(p[5]), ptrArg(p[6]), intArg(v), intArg(chunk), f32Arg(temperature)); err != nil {
			return err
		}
		bad, err := b.readFlag(op, name)
		if err != nil {
			return err
		}
		if bad >= 0 {
			return b.targetError(op, targets, bad, v)
		}
		return nil
	})
}

// maskedPartials is the number of first-pass blocks of MaskedSum for n elements: it depends
// only on n, so the summation order (and the result) is the same on every run.
func maskedPartials(n int) int { return max(1, min(ceilDiv(n, blockSize*16), 1024)) }

// MaskedSum is the device kernel of tensor.MaskedSum: float64 accumulation, two fixed-order
// passes, positions with mask 0 skipped.
func (b *Backend) MaskedSum(values, mask *tensor.Tensor) (sum, count float64, err error) {
	const op = "tensor.MaskedSum"
	n := values.Len()
	if n == 0 {
		return 0, 0, nil
	}
	err = b.do(op, func() error {
		p, err := b.ptrs(op, []string{"values", "mask"}, values, mask)
		if err != nil {
			return err
		}
		g := maskedPartials(n)
		chunk := ceilDiv(n, g)
		g = ceilDiv(n, chunk)
		part, err := b.scratchPtr(op, int64(g)*16)
		if err != nil {
			return err
		}
		if err := b.launch(op, "masked_sum_partial_fwd_f32", g, 1, blockSize, 0,
			ptrArg(part), ptrArg(p[0]), ptrArg(p[1]), intArg(n), intArg(chunk)); err != nil {
			return err
		}
		const k2 = "masked_sum_final_fwd_f32"
		if err := b.launch(op, k2, 1, 1, blockSize, 0, ptrArg(b.aux+auxResult), ptrArg(part), intArg(g)); err != nil {
			return err
		}
		var out [2]float64
		if err := cu.MemcpyDtoH(unsafe.Pointer(&out[0]), b.aux+auxResult, 16); err != nil {
			return devErr(op, "cuMemcpyDtoH", k2, err)
		}
		sum, count = out[0], out[1]
		return nil
	})
	return sum, count, err
}

// TopPMask is the device kernel of tensor.TopPMask: one block per row, a radix selection of the
// k-th largest order key and an ordered pass for the ties (lower index first, NaN first).
func (b *Backend) TopPMask(dst, k, scores, mask *tensor.Tensor, p float32) error {
	const op = "tensor.TopPMask"
	rows, cols := scores.Dim(0), scores.Dim(1)
	if rows == 0 {
		return nil
	}
	return b.do(op, func() error {
		ps, err := b.ptrs(op, []string{"dst", "k", "scores", "mask"}, dst, k, scores, mask)
		if err != nil {
			return err
		}
		return b.launch(op, "topp_mask_fwd_f32", rows, 1, blockSize, 0,
			ptrArg(ps[0]), ptrArg(ps[1]), ptrArg(ps[2]), ptrArg(ps[3]), intArg(cols), f32Arg(p))
	})
}

// Penalty is the device kernel of divergence.Penalty (every kind; Full reduces one row per
// block in float64).
func (b *Backend) Penalty(dst, logp, ref *tensor.Tensor, kind divergence.Kind) error {
	const op = "divergence.Penalty"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "logp", "ref"}, dst, logp, ref)
		if err != nil {
			return err
		}
		if kind == divergence.Full {
			rows := dst.Len()
			if rows == 0 {
				return nil
			}
			return b.launch(op, "divergence_full_fwd_f32", rows, 1, blockSize, 0,
				ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(logp.Dim(-1)))
		}
		return b.elementwise(op, "divergence_penalty_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(dst.Len()), intArg(int(kind)))
	})
}

// PenaltyGrad is the device kernel of divergence.PenaltyGrad (every kind).
func (b *Backend) PenaltyGrad(dst, logp, ref *tensor.Tensor, kind divergence.Kind) error {
	const op = "divergence.PenaltyGrad"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "logp", "ref"}, dst, logp, ref)
		if err != nil {
			return err
		}
		return b.elementwise(op, "divergence_penalty_bwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(dst.Len()), intArg(int(kind)))
	})
}

// PerceptionScore is the device kernel of divergence.PerceptionScore.
func (b *Backend) PerceptionScore(dst, old, aug *tensor.Tensor) error {
	const op = "divergence.PerceptionScore"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "old", "aug"}, dst, old, aug)
		if err != nil {
			return err
		}
		return b.elementwise(op, "divergence_perception_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(dst.Len()))
	})
}

// Rewards is the device kernel of divergence.Rewards.
func (b *Backend) Rewards(dst, scores, logp, ref *tensor.Tensor, klRatio float32) error {
	const op = "divergence.Rewards"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "scores", "logp", "ref"}, dst, scores, logp, ref)
		if err != nil {
			return err
		}
		return b.elementwise(op, "divergence_rewards_fwd_f32", dst.Len(), ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]), intArg(dst.Len()), f32Arg(klRatio))
	})
}

// elementwise launches a grid-stride kernel over n elements (nothing for n == 0).
func (b *Backend) elementwise(op, name string, n int, args ...arg) error {
	if n == 0 {
		return nil
	}
	return b.launch(op, name, b.grid1D(n), 1, blockSize, 0, args...)
}
