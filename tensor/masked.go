package tensor

import "github.com/mtrl-go/mtrl/internal/hostops"

// Masked reductions with the reference's numerics: masked_mean(v, m) = sum(v*m)/(sum(m)+1e-8),
// computed in float32 (accumulated in float64, which only makes the sums more exact). Masks are
// float32 tensors of 0/1 (fractional weights work too) with the shape of the values.

// MaskedReduceKernel is implemented by backends that reduce on the device.
type MaskedReduceKernel interface {
	// MaskedSum returns sum(v*m) and sum(m) over all elements.
	MaskedSum(v, m *Tensor) (sum, count float64, err error)
}

// MaskedStatsKernel is implemented by backends that compute the other masked statistics on the
// device. Arguments arrive validated; the semantics are those of the functions of the same name.
type MaskedStatsKernel interface {
	MaskedMeanRows(dst, v, m *Tensor) error
	MaskedVar(v, m *Tensor, unbiased bool) (float32, error)
	MaskedWhiten(dst, v, m *Tensor) error
}

func checkMasked(op string, v, m *Tensor) error {
	if err := CheckSameShape(op, "values", v, "mask", m); err != nil {
		return err
	}
	if err := CheckDType(op, "values", v, Float32); err != nil {
		return err
	}
	if err := CheckDType(op, "mask", m, Float32); err != nil {
		return err
	}
	return CheckSameBackend(op, []string{"values", "mask"}, v, m)
}

// MaskedSum returns sum(values*mask) and sum(mask).
func MaskedSum(values, mask *Tensor) (sum, count float64, err error) {
	const op = "tensor.MaskedSum"
	if err := checkMasked(op, values, mask); err != nil {
		return 0, 0, err
	}
	if k, ok := KernelOf[MaskedReduceKernel](values.Backend()); ok {
		return k.MaskedSum(values, mask)
	}
	err = OnHost(0, []*Tensor{values, mask}, func(h []*Tensor) error {
		v, _ := h[0].Float32s()
		m, _ := h[1].Float32s()
		sum, count = hostops.MaskedSum(v, m)
		return nil
	})
	return sum, count, err
}

// MaskedMean returns the reference's masked_mean over all elements (0 when the mask is empty).
func MaskedMean(values, mask *Tensor) (float32, error) {
	sum, count, err := MaskedSum(values, mask)
	if err != nil {
		return 0, retag(err, "tensor.MaskedSum", "tensor.MaskedMean")
	}
	return hostops.MeanOf(sum, count), nil
}

// MaskedMeanRows writes the masked mean of each row of a [B, T] tensor into dst [B].
func MaskedMeanRows(dst, values, mask *Tensor) error {
	const op = "tensor.MaskedMeanRows"
	if err := checkMasked(op, values, mask); err != nil {
		return err
	}
	if err := CheckShape(op, "values", values, -1, -1); err != nil {
		return err
	}
	if err := CheckShape(op, "dst", dst, values.Dim(0)); err != nil {
		return err
	}
	if err := CheckDType(op, "dst", dst, Float32); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"values", "dst"}, values, dst); err != nil {
		return err
	}
	if k, ok := KernelOf[MaskedStatsKernel](values.Backend()); ok {
		return k.MaskedMeanRows(dst, values, mask)
	}
	return OnHost(1, []*Tensor{dst, values, mask}, func(h []*Tensor) error {
		d, _ := h[0].Float32s()
		v, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		hostops.MaskedMeanRows(d, v, m, values.Dim(1))
		return nil
	})
}

// MaskedVar returns the reference's masked_var. With unbiased set and a mask sum above one it
// applies Bessel's correction; at most one selected element gives the biased variance (0).
func MaskedVar(values, mask *Tensor, unbiased bool) (float32, error) {
	const op = "tensor.MaskedVar"
	if err := checkMasked(op, values, mask); err != nil {
		return 0, err
	}
	if k, ok := KernelOf[MaskedStatsKernel](values.Backend()); ok {
		return k.MaskedVar(values, mask, unbiased)
	}
	var out float32
	err := OnHost(0, []*Tensor{values, mask}, func(h []*Tensor) error {
		v, _ := h[0].Float32s()
		m, _ := h[1].Float32s()
		out = hostops.MaskedVar(v, m, unbiased)
		return nil
	})
	return out, err
}

// MaskedWhiten writes (values - mean) / sqrt(var + 1e-8) into dst, with the masked mean and
// unbiased masked variance. Every position is whitened, masked or not, as in the reference; with
// at most one selected element the scale is 1e4. dst may be values itself.
func MaskedWhiten(dst, values, mask *Tensor) error {
	const op = "tensor.MaskedWhiten"
	if err := checkMasked(op, values, mask); err != nil {
		return err
	}
	if err := CheckSameShape(op, "values", values, "dst", dst); err != nil {
		return err
	}
	if err := CheckDType(op, "dst", dst, Float32); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"values", "dst"}, values, dst); err != nil {
		return err
	}
	if k, ok := KernelOf[MaskedStatsKernel](values.Backend()); ok {
		return k.MaskedWhiten(dst, values, mask)
	}
	return OnHost(1, []*Tensor{dst, values, mask}, func(h []*Tensor) error {
		d, _ := h[0].Float32s()
		v, _ := h[1].Float32s()
		m, _ := h[2].Float32s()
		hostops.MaskedWhiten(d, v, m)
		return nil
	})
}

// retag renames the op of an *Error produced by a helper op.
func retag(err error, from, to string) error {
	if e, ok := err.(*Error); ok && e.Op == from {
		c := *e
		c.Op = to
		return &c
	}
	return err
}
