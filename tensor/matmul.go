package tensor

import (
	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/internal/nnref"
)

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
// float32 (the pure-Go kernel sums over K in ascending order; bfloat16 a and b, untransposed a,
// run on VDPBF16PS where the CPU has AVX512_BF16, b packed per call). Weights of a linear layer are
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
		nb := batch.NumElements()
		if a.dtype == BFloat16 && b.dtype == BFloat16 && !o.TransA && gemm.BF16() {
			matMulBF16(h, nb, m, n, k, b.Rank() > 2, o)
			return nil
		}
		cv, av, bv := hostF32(h[0]), hostF32(h[1]), hostF32(h[2])
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

// matMulBF16 is MatMul of host bfloat16 a and b on internal/gemm's VDPBF16PS kernels: b (or each
// batch's b) is packed into pair panels, O(K·N) against the product's O(M·K·N).
func matMulBF16(h []*Tensor, nb, m, n, k int, batched bool, o MatMulOptions) {
	cv := hostF32(h[0])
	av, _ := h[1].BF16s()
	bv, _ := h[2].BF16s()
	pack := func(b []BF16) *gemm.PackedBF16 {
		if o.TransB { // b is [N, K]: W itself
			return gemm.PackBF16(n, k, b)
		}
		return gemm.PackTBF16(k, n, b)
	}
	if !batched {
		gemm.MulBF16(nb*m, av, k, pack(bv), cv, n, o.Accumulate)
		return
	}
	for i := range nb {
		gemm.MulBF16(m, av[i*m*k:(i+1)*m*k], k, pack(bv[i*k*n:(i+1)*k*n]), cv[i*m*n:(i+1)*m*n], n, o.Accumulate)
	}
}
