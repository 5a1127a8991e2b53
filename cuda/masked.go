//go:build cuda

package cuda

import (
	"math"
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
)

// The masked statistics: tensor.MaskedSum, MaskedMeanRows, MaskedVar, MaskedWhiten (kernels/masked.cu).
var (
	_ tensor.MaskedReduceKernel = deviceKernels{}
	_ tensor.MaskedStatsKernel  = deviceKernels{}
)

// maskedPartials is the number of first-pass blocks of MaskedSum for n elements: it depends
// only on n, so the summation order (and the result) is the same on every run.
func maskedPartials(n int) int { return max(1, min(ceilDiv(n, blockSize*16), 1024)) }

// MaskedSum is the device kernel of tensor.MaskedSum: float64 accumulation, two fixed-order
// passes, positions with mask 0 skipped.
func (b deviceKernels) MaskedSum(values, mask *tensor.Tensor) (sum, count float64, err error) {
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
		b.traffic.down.add(16)
		sum, count = out[0], out[1]
		return nil
	})
	return sum, count, err
}

// maskedTotal runs the two fixed-order passes of MaskedSum (kernel k1 with extra arguments,
// then masked_sum_final_fwd_f32) over n elements and returns the two float64 totals.
func (b *Backend) maskedTotal(op, k1 string, pv, pm cu.DevicePtr, n int, extra ...arg) (float64, float64, error) {
	g := maskedPartials(n)
	chunk := ceilDiv(n, g)
	g = ceilDiv(n, chunk)
	part, err := b.scratchPtr(op, int64(g)*16)
	if err != nil {
		return 0, 0, err
	}
	args := append([]arg{ptrArg(part), ptrArg(pv), ptrArg(pm), intArg(n), intArg(chunk)}, extra...)
	if err := b.launch(op, k1, g, 1, blockSize, 0, args...); err != nil {
		return 0, 0, err
	}
	const k2 = "masked_sum_final_fwd_f32"
	if err := b.launch(op, k2, 1, 1, blockSize, 0, ptrArg(b.aux+auxResult), ptrArg(part), intArg(g)); err != nil {
		return 0, 0, err
	}
	var out [2]float64
	if err := b.download(op, unsafe.Pointer(&out[0]), b.aux+auxResult, 16); err != nil {
		return 0, 0, err
	}
	return out[0], out[1], nil
}

// maskedMoments is hostops' maskedMoments on device data: the float32 masked mean and the
// (optionally Bessel-corrected) masked variance, every sum in float64 in a fixed order.
func (b *Backend) maskedMoments(op string, pv, pm cu.DevicePtr, n int, unbiased bool) (mean, variance float32, err error) {
	if n == 0 {
		return 0, 0, nil
	}
	sum, count, err := b.maskedTotal(op, "masked_sum_partial_fwd_f32", pv, pm, n)
	if err != nil {
		return 0, 0, err
	}
	mean = hostops.MeanOf(sum, count)
	sq, _, err := b.maskedTotal(op, "masked_sqdev_partial_fwd_f32", pv, pm, n, f32Arg(mean))
	if err != nil {
		return 0, 0, err
	}
	variance = hostops.MeanOf(sq, count)
	if unbiased && count > 1 {
		variance *= float32(count) / float32(count-1)
	}
	return mean, variance, nil
}

// whiten writes (v - mean) * rsqrt(var + 1e-8) into dst (n elements, dst may be v) with the
// masked mean and unbiased masked variance, as hostops.MaskedWhiten.
func (b *Backend) whiten(op string, pd, pv, pm cu.DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	mean, variance, err := b.maskedMoments(op, pv, pm, n, true)
	if err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(variance+1e-8)))
	return b.elementwise(op, "masked_whiten_fwd_f32", n, ptrArg(pd), ptrArg(pv), intArg(n), f32Arg(mean), f32Arg(scale))
}

// MaskedMeanRows is the device kernel of tensor.MaskedMeanRows: one block per row, float64
// accumulation in a fixed order.
func (b deviceKernels) MaskedMeanRows(dst, values, mask *tensor.Tensor) error {
	const op = "tensor.MaskedMeanRows"
	rows, cols := values.Dim(0), values.Dim(1)
	if rows == 0 {
		return nil
	}
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "values", "mask"}, dst, values, mask)
		if err != nil {
			return err
		}
		return b.launch(op, "masked_meanrows_fwd_f32", rows, 1, blockSize, 0, ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), intArg(cols))
	})
}

// MaskedVar is the device kernel of tensor.MaskedVar: two fixed-order float64 passes (sums,
// then squared deviations from the float32 mean), finished on the host as hostops does.
func (b deviceKernels) MaskedVar(values, mask *tensor.Tensor, unbiased bool) (float32, error) {
	const op = "tensor.MaskedVar"
	var out float32
	err := b.do(op, func() error {
		p, err := b.ptrs(op, []string{"values", "mask"}, values, mask)
		if err != nil {
			return err
		}
		_, out, err = b.maskedMoments(op, p[0], p[1], values.Len(), unbiased)
		return err
	})
	return out, err
}

// MaskedWhiten is the device kernel of tensor.MaskedWhiten (dst may be values).
func (b deviceKernels) MaskedWhiten(dst, values, mask *tensor.Tensor) error {
	const op = "tensor.MaskedWhiten"
	return b.do(op, func() error {
		p, err := b.ptrs(op, []string{"dst", "values", "mask"}, dst, values, mask)
		if err != nil {
			return err
		}
		return b.whiten(op, p[0], p[1], p[2], values.Len())
	})
}
