//go:build cuda

package cuda

import (
	"encoding/binary"
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// The fused log-prob + entropy family: tensor.LogProbEntropy and its backward (kernels/logprob.cu).
var _ tensor.LogProbEntropyKernel = deviceKernels{}

func dtypeSuffix(d tensor.DType) string {
	if d == tensor.BFloat16 {
		return "bf16"
	}
	return "f32"
}

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
func (b deviceKernels) LogProbEntropy(logp, entropy, logits, targets *tensor.Tensor, temperature float32) error {
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
func (b deviceKernels) LogProbEntropyBackward(dlogits, logits, targets, logp, entropy, dlogp, dentropy *tensor.Tensor, temperature float32) error {
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
