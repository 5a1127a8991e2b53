package tensor

import (
	"math"
	"strconv"
)

// The Check functions are the validation vocabulary of every mtrl entry point. Each returns nil
// or an *Error naming op and arg.

// CheckShape checks that t is non-nil and has the given dimensions; -1 matches any size.
func CheckShape(op, arg string, t *Tensor, dims ...int) error {
	if t == nil {
		return Errorf(ErrShape, op, arg, "is nil")
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

// CheckSameShape checks that a and b are non-nil and have equal shapes.
func CheckSameShape(op, argA string, a *Tensor, argB string, b *Tensor) error {
	if a == nil {
		return Errorf(ErrShape, op, argA, "is nil")
	}
	if b == nil {
		return Errorf(ErrShape, op, argB, "is nil")
	}
	if !a.shape.Equal(b.shape) {
		return Errorf(ErrShape, op, argB, "has shape %v, %s has %v", b.shape, argA, a.shape)
	}
	return nil
}

// CheckDType checks that t's dtype is one of want.
func CheckDType(op, arg string, t *Tensor, want ...DType) error {
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

// CheckSameBackend checks that every non-nil tensor lives on the same backend as the first.
// Names label the tensors in the error message.
func CheckSameBackend(op string, names []string, ts ...*Tensor) error {
	var first *Tensor
	var firstName string
	for i, t := range ts {
		if t == nil {
			continue
		}
		if first == nil {
			first, firstName = t, names[i]
			continue
		}
		if t.Backend() != first.Backend() {
			return Errorf(ErrBackend, op, names[i], "is on %s, %s is on %s", t.Backend().Name(), firstName, first.Backend().Name())
		}
	}
	return nil
}

// CheckFinite returns an ErrNotFinite error naming the first NaN or ±Inf element of a float
// tensor. Ops propagate non-finite values rather than checking on every call; this is the cheap
// opt-in check (one read of the data; device tensors are copied to host first).
func CheckFinite(op, arg string, t *Tensor) error {
	if t == nil {
		return Errorf(ErrShape, op, arg, "is nil")
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
