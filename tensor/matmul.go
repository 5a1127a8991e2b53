package tensor

import "github.com/mtrl-go/mtrl/internal/nnref"

// MatMulOptions select the transposes and the accumulation of MatMul.
type MatMulOptions struct {
	// TransA and TransB read a as [..., K, M] and b as [..., N, K] (their transposes are used).
	TransA, TransB bool
	// Accumulate adds the product to c instead of overwriting it.
	Accumulate bool
}

// MatMulKernel is implemented by backends with their own matrix multiply.
type MatMulKernel interface {
	MatMul(c, a, b *Tensor, o MatMulOptions) error
}

// MatMul computes c = op(a)·op(b) (c += with Accumulate): a is [..., M, K] and b is [K, N], shared
// by every leading index of a, or [..., K, N] with a's leading dimensions (batched); c is
// [..., M, N] (float32). a and b are float32 or bfloat16 in any mix; products are summed in
// float32 (the pure-Go kernel sums over K in ascending order). Weights of a linear layer are
// better served by PackWeight and Linear, which never transpose per call.
func MatMul(c, a, b *Tensor, o MatMulOptions) error {
	const op = "tensor.MatMul"
	names := []string{"c", "a", "b"}
	if err := checkNonNil(op, names, c, a, b); err != nil {
		return err
	}
	for i, t := range []*Tensor{a, b} {
		if err := CheckDType(op, names[i+1], t, Float32, BFloat16); err != nil {
			return err
		}
		if t.Rank() < 2 {
			return Errorf(ErrShape, op, names[i+1], "has shape %v, want at least 2 dimensions", t.shape)
		}
	}
	if err := CheckDType(op, "c", c, Float32); err != nil {
		return err
	}
	m, k := a.Dim(-2), a.Dim(-1)
	if o.TransA {
		m, k = k, m
	}
	kb, n := b.Dim(-2), b.Dim(-1)
	if o.TransB {
		kb, n = n, kb
	}
	if kb != k {
		return Errorf(ErrShape, op, "b", "has shape %v (TransB %v), a has %v (TransA %v): inner dimensions %d and %d differ", b.shape, o.TransB, a.shape, o.TransA, k, kb)
	}
	batch := a.shape[:a.Rank()-2]
	if b.Rank() > 2 && !b.shape[:b.Rank()-2].Equal(batch) {
		return Errorf(ErrShape, op, "b", "has shape %v, want [K, N] or a's leading dimensions %v", b.shape, batch)
	}
	if err := CheckShape(op, "c", c, append(append([]int{}, batch...), m, n)...); err != nil {
		return err
	}
	if err := CheckSameBackend(op, names, c, a, b); err != nil {
		return err
	}
	if k, ok := KernelOf[MatMulKernel](a.Backend()); ok {
		return k.MatMul(c, a, b, o)
	}
	return OnHost(1, []*Tensor{c, a, b}, func(h []*Tensor) error {
		cv, av, bv := hostF32(h[0]), hostF32(h[1]), hostF32(h[2])
		nb := batch.NumElements()
		if b.Rank() == 2 && !o.TransA { // one product over all rows of a
			nnref.Gemm(false, o.TransB, nb*m, n, k, av, bv, o.Accumulate, cv)
			return nil
		}
		for i := range nb {
			bi := bv
			if b.Rank() > 2 {
				bi = bv[i*k*n : (i+1)*k*n]
			}
			nnref.Gemm(o.TransA, o.TransB, m, n, k, av[i*m*k:(i+1)*m*k], bi, o.Accumulate, cv[i*m*n:(i+1)*m*n])
		}
		return nil
	})
}
