package tensor

// Host helpers of the transformer op families (matmul.go … lmhead.go): their pure-Go kernels
// live in internal/nnref and read float32 slices.

// hostF32 returns a host tensor's elements as float32: the tensor's own slice for float32, a
// widened copy for bfloat16, nil for a nil tensor.
func hostF32(t *Tensor) []float32 {
	if t == nil {
		return nil
	}
	if t.dtype == Float32 {
		v, _ := t.Float32s()
		return v
	}
	b, _ := t.BF16s()
	v := make([]float32, len(b))
	for i, h := range b {
		v[i] = h.Float32()
	}
	return v
}

// hostI32 returns a host int32 tensor's elements.
func hostI32(t *Tensor) []int32 {
	v, _ := t.Int32s()
	return v
}

// checkF32 checks that every non-nil tensor is float32.
func checkF32(op string, names []string, ts ...*Tensor) error {
	for i, t := range ts {
		if t != nil {
			if err := CheckDType(op, names[i], t, Float32); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNonNil checks that every tensor is non-nil.
func checkNonNil(op string, names []string, ts ...*Tensor) error {
	for i, t := range ts {
		if t == nil {
			return Errorf(ErrShape, op, names[i], "is nil")
		}
	}
	return nil
}

// checkAll runs the checks every op of these families makes on its tensors: required ones
// non-nil, all float32 except those listed in other, all on one backend.
func checkAll(op string, names []string, required int, ts ...*Tensor) error {
	if err := checkNonNil(op, names[:required], ts[:required]...); err != nil {
		return err
	}
	if err := checkF32(op, names, ts...); err != nil {
		return err
	}
	return CheckSameBackend(op, names, ts...)
}

// rowsOf returns the number of rows of t viewed as [rows, last dimension].
func rowsOf(t *Tensor) int { return t.shape[:t.Rank()-1].NumElements() }
