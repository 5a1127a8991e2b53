package tensor

import (
	"math"
	"strconv"
)

// The Check functions are the validation vocabulary of every mtrl entry point. Each returns nil
// or an *Error naming op and arg.

// CheckTensor checks that t is a tensor: not nil and not the zero Tensor (a Tensor{} literal,
// which has no storage). Every Check function below starts with it, so an entry point that
// checks its tensors refuses both with an ErrShape error instead of panicking.
func CheckTensor(op, arg string, t *Tensor) error {
	switch {
	case t == nil:
		return Errorf(ErrShape, op, arg, "is nil")
	case t.store == nil:
		return Errorf(ErrShape, op, arg, "is the zero Tensor (make tensors with tensor.New, To or a FromXxx function)")
	}
	return nil
}

// CheckShape checks that t is a tensor (CheckTensor) with the given dimensions; -1 matches any
// size.
func CheckShape(op, arg string, t *Tensor, dims ...int) error {
	if err := CheckTensor(op, arg, t); err != nil {
		return err
	}
	ok := len(t.shape) == len(dims)
	for i := 0; ok && i < len(dims); i++ {
		ok = dims[i] < 0 || dims[i] == t.shape[i]
	}
	if !ok {
		return Errorf(ErrShape, op, arg, "has shape %v, want %v", t.shape, shapePattern(dims))
	}
	return nil
}

func shapePattern(dims []int) string {
	s := "["
	for i, d := range dims {
		if i > 0 {
			s += " "
		}
		if d < 0 {
			s += "*"
		} else {
			s += strconv.Itoa(d)
		}
	}
	return s + "]"
}

// CheckSameShape checks that a and b are tensors (CheckTensor) with equal shapes.
func CheckSameShape(op, argA string, a *Tensor, argB string, b *Tensor) error {
	if err := CheckTensor(op, argA, a); err != nil {
		return err
	}
	if err := CheckTensor(op, argB, b); err != nil {
		return err
	}
	if !a.shape.Equal(b.shape) {
		return Errorf(ErrShape, op, argB, "has shape %v, %s has %v", b.shape, argA, a.shape)
	}
	return nil
}

// CheckDType checks that t is a tensor (CheckTensor) whose dtype is one of want.
func CheckDType(op, arg string, t *Tensor, want ...DType) error {
	if err := CheckTensor(op, arg, t); err != nil {
		return err
	}
	for _, w := range want {
		if t.dtype == w {
			return nil
		}
	}
	if len(want) == 1 {
		return Errorf(ErrDType, op, arg, "is %v, want %v", t.dtype, want[0])
	}
	return Errorf(ErrDType, op, arg, "is %v, want one of %v", t.dtype, want)
}

// CheckSameBackend checks that every non-nil tensor lives on the same backend as the first
// (nil entries are optional tensors left out; a zero Tensor is an error). Names label the
// tensors in the error message; a tensor without a name is called "tensors[i]".
func CheckSameBackend(op string, names []string, ts ...*Tensor) error {
	name := func(i int) string {
		if i < len(names) {
			return names[i]
		}
		return "tensors[" + strconv.Itoa(i) + "]"
	}
	var first *Tensor
	var firstName string
	for i, t := range ts {
		if t == nil {
			continue
		}
		if err := CheckTensor(op, name(i), t); err != nil {
			return err
		}
		if first == nil {
			first, firstName = t, name(i)
			continue
		}
		if t.Backend() != first.Backend() {
			return Errorf(ErrBackend, op, name(i), "is on %s, %s is on %s", t.Backend().Name(), firstName, first.Backend().Name())
		}
	}
	return nil
}

// CheckFinite returns an ErrNotFinite error naming the first NaN or ±Inf element of a float
// tensor. Ops propagate non-finite values rather than checking on every call; this is the cheap
// opt-in check (one read of the data; device tensors are copied to host first).
func CheckFinite(op, arg string, t *Tensor) error {
	if err := CheckTensor(op, arg, t); err != nil {
		return err
	}
	return OnHost(0, []*Tensor{t}, func(h []*Tensor) error {
		bad := -1
		switch h[0].dtype {
		case Float32:
			v, _ := h[0].Float32s()
			for i, x := range v {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					bad = i
					break
				}
			}
		case BFloat16:
			v, _ := h[0].BF16s()
			for i, x := range v {
				if x&0x7f80 == 0x7f80 {
					bad = i
					break
				}
			}
		}
		if bad >= 0 {
			return Errorf(ErrNotFinite, op, arg, "element %d is not finite", bad)
		}
		return nil
	})
}

// CheckUnit checks that a probability-like parameter lies in [0, 1] (and is not NaN).
func CheckUnit(op, arg string, p float64) error {
	if !(p >= 0 && p <= 1) {
		return Errorf(ErrParam, op, arg, "is %v, want a value in [0, 1]", p)
	}
	return nil
}

// CheckRange checks that n bytes at byte offset off lie inside storage of size bytes, without
// computing off+n (which can overflow): the range check of every backend's Upload, Download
// and Copy.
func CheckRange(op, arg string, size, off, n int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return Errorf(ErrShape, op, arg, "byte range of %d bytes at offset %d is outside storage of %d bytes", n, off, size)
	}
	return nil
}
