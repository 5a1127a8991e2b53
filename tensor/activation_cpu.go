package tensor

import (
	"unsafe"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/hostops"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// The CPU activations of the sigmoid family (SiLU, QuickGELU and SwiGLU's SiLU) in float32:
// σ(βx) = 1/(1 + exp(−βx)) with hostops.Exp32 (about 2 ulp) instead of math.Exp in float64,
// whose conversions and call were a fifth of the toy VLM's decode. The results stay within a
// few float32 ulps of the float64 reference (TestActivationF32Ulps). GELU and GELUTanh are
// float32 too (activation_gelu.go). On amd64 the loops run as AVX-512 or AVX2 kernels
// (activation_amd64.s) that give the same float32 results bit for bit (TestActivationSIMD).

// sigmoidBeta is β of x·σ(βx) for the activations evaluated here, and false for the others.
func sigmoidBeta(a Activation) (float32, bool) {
	switch a {
	case SiLU:
		return 1, true
	case QuickGELU:
		return 1.702, true
	}
	return 0, false
}

// sigmoid32 is σ(x) in float32; exp(−x) overflows to +Inf for x below about −88, giving 0.
func sigmoid32(x float32) float32 { return 1 / (1 + hostops.Exp32(-x)) }

// sigmoidPair32 is σ(x) and 1 − σ(x) = σ(−x), the latter without the cancellation of 1 − σ
// for large x (where it would lose all its digits and with them silu′'s x·σ(1−σ) term).
func sigmoidPair32(x float32) (s, oms float32) {
	e := hostops.Exp32(-x)
	s = 1 / (1 + e)
	if e > 1 {
		return s, 1 - s // σ < 1/2: no cancellation, and e may be +Inf
	}
	return s, e * s
}

// The float32 conversions of products that are then added keep them rounded (no FMA under
// GOAMD64=v3), as the vector kernels compute.

// actKernels is a vector implementation of the loops below over whole vectors of lanes
// elements (activation_amd64.s), bit-identical to them: each returns nonzero when an exp
// argument exceeded expVecMax, and the caller redoes those elements with the Go loop.
type actKernels struct {
	lanes     int
	fwd       func(y, x []float32, beta float32) int32
	bwd       func(dx, x, dy []float32, beta float32) int32
	swiGLU    func(y, gate, up []float32) int32
	swiGLUBwd func(dgate, dup, gate, up, dy []float32) int32

	gelu, geluTanh       func(y, x []float32) int32
	geluBwd, geluTanhBwd func(dx, x, dy []float32) int32

	// On bfloat16, widened at the load and rounded once at the store.
	fwd16       func(y, x []uint16, beta float32) int32
	bwd16       func(dx, x, dy []uint16, beta float32) int32
	swiGLU16    func(y, gate, up []uint16) int32
	swiGLUBwd16 func(dgate, dup, gate, up, dy []uint16) int32

	gelu16, geluTanh16       func(y, x []uint16) int32
	geluBwd16, geluTanhBwd16 func(dx, x, dy []uint16) int32
}

// expVecMax is hostops.Exp32's expMax: above it Exp32 takes math.Exp, which the kernels do not.
const expVecMax = 88

// actImpls lists the activation kernels this build and CPU can run, the Go loops last.
var actImpls = dispatch.New(actSIMD()...)

// vecSplit returns the kernels and the length of x's whole vectors, 0 with nil for the Go loops.
func vecSplit(n int) (*actKernels, int) {
	k := actImpls.Active()
	if k == nil {
		return nil, 0
	}
	return k, n / k.lanes * k.lanes
}

// runVec runs an activation over n elements in parallel chunks: vec (a vector kernel, given the
// chunk's whole vectors [lo, hi)) and one (the Go loop's element: in holds the chunk's inputs,
// element i of them being element lo+i of the op) on the rest. vec returns nonzero when an
// exp argument passed expVecMax, and one then redoes the elements big flags. An output may be
// an input (alias): the fix-up then reads copies of the chunk's inputs made before the kernel
// ran. The inputs are float32 or bfloat16.
func runVec[E float32 | BF16](n int, ins [][]E, alias bool, vec func(k *actKernels, lo, hi int) int32,
	big func(in [][]E, i int) bool, one func(in [][]E, i, o int)) {
	parallel.For(n, 1<<14, func(lo, hi int) {
		k, m := vecSplit(hi - lo)
		in := make([][]E, len(ins))
		var s *arena
		for j, x := range ins {
			in[j] = x[lo:hi]
			if alias && m > 0 {
				if s == nil {
					s = arenas.Get().(*arena)
					s.off = 0
				}
				in[j] = append(takeAs[E](s, hi-lo), in[j]...)
			}
		}
		if m > 0 && vec(k, lo, lo+m) != 0 {
			for i := range m {
				if big(in, i) {
					one(in, i, lo+i)
				}
			}
		}
		for i := m; i < hi-lo; i++ {
			one(in, i, lo+i)
		}
		if s != nil {
			arenas.Put(s)
		}
	})
}

// takeAs returns an empty slice of capacity n in s's scratch.
func takeAs[E float32 | BF16](s *arena, n int) []E {
	var z E
	f := s.take((n*int(unsafe.Sizeof(z)) + 3) / 4)
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(f))), n)[:0]
}

// overlap reports whether any of outs shares memory with any of ins.
func overlap[E float32 | BF16](outs, ins [][]E) bool {
	var z E
	sz := uintptr(unsafe.Sizeof(z))
	for _, o := range outs {
		for _, x := range ins {
			if len(o) == 0 || len(x) == 0 {
				continue
			}
			o0, x0 := uintptr(unsafe.Pointer(&o[0])), uintptr(unsafe.Pointer(&x[0]))
			if o0 < x0+uintptr(len(x))*sz && x0 < o0+uintptr(len(o))*sz {
				return true
			}
		}
	}
	return false
}

// actFwdOf returns activation a's float32 definition per element, its fix-up test (the exp
// argument passes expVecMax) and its float32 vector kernel.
func actFwdOf(a Activation) (one func(float32) float32, big func(float32) bool, vec func(k *actKernels, y, x []float32) int32) {
	switch a {
	case GELU:
		return gelu32, func(float32) bool { return false }, func(k *actKernels, y, x []float32) int32 { return k.gelu(y, x) }
	case GELUTanh:
		return geluTanh32, func(v float32) bool { return -geluTanhArg(v) > expVecMax },
			func(k *actKernels, y, x []float32) int32 { return k.geluTanh(y, x) }
	}
	beta, _ := sigmoidBeta(a)
	return func(v float32) float32 { return v * sigmoid32(beta*v) }, func(v float32) bool { return -(beta * v) > expVecMax },
		func(k *actKernels, y, x []float32) int32 { return k.fwd(y, x, beta) }
}

// actBwdOf is actFwdOf for the derivative a'(x).
func actBwdOf(a Activation) (grad func(float32) float32, big func(float32) bool, vec func(k *actKernels, dx, x, dy []float32) int32) {
	switch a {
	case GELU:
		return geluGrad32, func(float32) bool { return false },
			func(k *actKernels, dx, x, dy []float32) int32 { return k.geluBwd(dx, x, dy) }
	case GELUTanh:
		return geluTanhGrad32, func(v float32) bool { return -geluTanhArg(v) > expVecMax },
			func(k *actKernels, dx, x, dy []float32) int32 { return k.geluTanhBwd(dx, x, dy) }
	}
	beta, _ := sigmoidBeta(a)
	return func(v float32) float32 {
			s, oms := sigmoidPair32(beta * v)
			return s + float32(beta*v*s*oms)
		}, func(v float32) bool { return -(beta * v) > expVecMax },
		func(k *actKernels, dx, x, dy []float32) int32 { return k.bwd(dx, x, dy, beta) }
}

// activateCPU writes y = a(x) in float32: x·σ(βx) for SiLU and QuickGELU, gelu32 and
// geluTanh32 for GELU and GELUTanh. y may be x.
func activateCPU(a Activation, x, y []float32) {
	one, big, vec := actFwdOf(a)
	runVec(len(x), [][]float32{x}, overlap([][]float32{y}, [][]float32{x}),
		func(k *actKernels, lo, hi int) int32 { return vec(k, y[lo:hi], x[lo:hi]) },
		func(in [][]float32, i int) bool { return big(in[0][i]) },
		func(in [][]float32, i, o int) { y[o] = one(in[0][i]) })
}

// activateBackwardCPU writes dx = dy·a'(x) in float32: dy·(σ + βx·σ(1−σ)) with σ = σ(βx) for
// SiLU and QuickGELU, geluGrad32 and geluTanhGrad32 for GELU and GELUTanh. dx may be dy.
func activateBackwardCPU(a Activation, x, dy, dx []float32) {
	grad, big, vec := actBwdOf(a)
	runVec(len(x), [][]float32{x, dy}, overlap([][]float32{dx}, [][]float32{x, dy}),
		func(k *actKernels, lo, hi int) int32 { return vec(k, dx[lo:hi], x[lo:hi], dy[lo:hi]) },
		func(in [][]float32, i int) bool { return big(in[0][i]) },
		func(in [][]float32, i, o int) { dx[o] = in[1][i] * grad(in[0][i]) })
}

// swiGLUOne is swiGLUCPU's element: silu(g)·up.
func swiGLUOne(g, up float32) float32 { return g * sigmoid32(g) * up }

// swiGLUCPU writes y = silu(gate)·up in float32.
func swiGLUCPU(gate, up, y []float32) {
	runVec(len(gate), [][]float32{gate, up}, overlap([][]float32{y}, [][]float32{gate, up}),
		func(k *actKernels, lo, hi int) int32 { return k.swiGLU(y[lo:hi], gate[lo:hi], up[lo:hi]) },
		func(in [][]float32, i int) bool { return -in[0][i] > expVecMax },
		func(in [][]float32, i, o int) { y[o] = swiGLUOne(in[0][i], in[1][i]) })
}

// swiGLUGrads is swiGLUBackwardCPU's element: dgate = dy·up·silu'(g), dup = dy·silu(g).
func swiGLUGrads(g, up, d float32) (dgate, dup float32) {
	s, oms := sigmoidPair32(g)
	return d * up * (s + float32(g*s*oms)), d * (g * s)
}

// swiGLUBackwardCPU writes dgate = dy·up·silu'(gate) and dup = dy·silu(gate) in float32.
func swiGLUBackwardCPU(gate, up, dy, dgate, dup []float32) {
	runVec(len(gate), [][]float32{gate, up, dy}, overlap([][]float32{dgate, dup}, [][]float32{gate, up, dy}),
		func(k *actKernels, lo, hi int) int32 {
			return k.swiGLUBwd(dgate[lo:hi], dup[lo:hi], gate[lo:hi], up[lo:hi], dy[lo:hi])
		},
		func(in [][]float32, i int) bool { return -in[0][i] > expVecMax },
		func(in [][]float32, i, o int) { dgate[o], dup[o] = swiGLUGrads(in[0][i], in[1][i], in[2][i]) })
}

// The bfloat16 activations run their own kernels, which widen each input as they load it and
// round each output once as they store it: the float32 loops' results, rounded, without a
// separate conversion pass. Each returns false, doing nothing, where no vector kernels run
// (the caller takes the blocked float32 path) or the activation has none.

func bfIn(x ...[]BF16) [][]BF16 { return x }

// actFwd16Of returns activation a's bfloat16 vector kernel, nil when it has none.
func actFwd16Of(a Activation) func(k *actKernels, y, x []uint16) int32 {
	switch a {
	case GELU:
		return func(k *actKernels, y, x []uint16) int32 { return k.gelu16(y, x) }
	case GELUTanh:
		return func(k *actKernels, y, x []uint16) int32 { return k.geluTanh16(y, x) }
	}
	if beta, ok := sigmoidBeta(a); ok {
		return func(k *actKernels, y, x []uint16) int32 { return k.fwd16(y, x, beta) }
	}
	return nil
}

// actBwd16Of is actFwd16Of for the backward.
func actBwd16Of(a Activation) func(k *actKernels, dx, x, dy []uint16) int32 {
	switch a {
	case GELU:
		return func(k *actKernels, dx, x, dy []uint16) int32 { return k.geluBwd16(dx, x, dy) }
	case GELUTanh:
		return func(k *actKernels, dx, x, dy []uint16) int32 { return k.geluTanhBwd16(dx, x, dy) }
	}
	if beta, ok := sigmoidBeta(a); ok {
		return func(k *actKernels, dx, x, dy []uint16) int32 { return k.bwd16(dx, x, dy, beta) }
	}
	return nil
}

// activateBF16 is activateCPU on bfloat16.
func activateBF16(a Activation, x, y []BF16) bool {
	vec := actFwd16Of(a)
	if vec == nil || actImpls.Active() == nil {
		return false
	}
	one, big, _ := actFwdOf(a)
	xb, yb := bf16Bits(x), bf16Bits(y)
	runVec(len(x), bfIn(x), overlap(bfIn(y), bfIn(x)),
		func(k *actKernels, lo, hi int) int32 { return vec(k, yb[lo:hi], xb[lo:hi]) },
		func(in [][]BF16, i int) bool { return big(in[0][i].Float32()) },
		func(in [][]BF16, i, o int) { y[o] = BF16FromFloat32(one(in[0][i].Float32())) })
	return true
}

// activateBackwardBF16 is activateBackwardCPU on bfloat16.
func activateBackwardBF16(a Activation, x, dy, dx []BF16) bool {
	vec := actBwd16Of(a)
	if vec == nil || actImpls.Active() == nil {
		return false
	}
	grad, big, _ := actBwdOf(a)
	xb, dyb, dxb := bf16Bits(x), bf16Bits(dy), bf16Bits(dx)
	runVec(len(x), bfIn(x, dy), overlap(bfIn(dx), bfIn(x, dy)),
		func(k *actKernels, lo, hi int) int32 { return vec(k, dxb[lo:hi], xb[lo:hi], dyb[lo:hi]) },
		func(in [][]BF16, i int) bool { return big(in[0][i].Float32()) },
		func(in [][]BF16, i, o int) { dx[o] = BF16FromFloat32(in[1][i].Float32() * grad(in[0][i].Float32())) })
	return true
}

// swiGLUBF16 is swiGLUCPU on bfloat16.
func swiGLUBF16(gate, up, y []BF16) bool {
	if actImpls.Active() == nil {
		return false
	}
	gb, ub, yb := bf16Bits(gate), bf16Bits(up), bf16Bits(y)
	runVec(len(gate), bfIn(gate, up), overlap(bfIn(y), bfIn(gate, up)),
		func(k *actKernels, lo, hi int) int32 { return k.swiGLU16(yb[lo:hi], gb[lo:hi], ub[lo:hi]) },
		func(in [][]BF16, i int) bool { return -in[0][i].Float32() > expVecMax },
		func(in [][]BF16, i, o int) { y[o] = BF16FromFloat32(swiGLUOne(in[0][i].Float32(), in[1][i].Float32())) })
	return true
}

// swiGLUBackwardBF16 is swiGLUBackwardCPU on bfloat16.
func swiGLUBackwardBF16(gate, up, dy, dgate, dup []BF16) bool {
	if actImpls.Active() == nil {
		return false
	}
	gb, ub, db, dgb, dub := bf16Bits(gate), bf16Bits(up), bf16Bits(dy), bf16Bits(dgate), bf16Bits(dup)
	runVec(len(gate), bfIn(gate, up, dy), overlap(bfIn(dgate, dup), bfIn(gate, up, dy)),
		func(k *actKernels, lo, hi int) int32 {
			return k.swiGLUBwd16(dgb[lo:hi], dub[lo:hi], gb[lo:hi], ub[lo:hi], db[lo:hi])
		},
		func(in [][]BF16, i int) bool { return -in[0][i].Float32() > expVecMax },
		func(in [][]BF16, i, o int) {
			g, u := swiGLUGrads(in[0][i].Float32(), in[1][i].Float32(), in[2][i].Float32())
			dgate[o], dup[o] = BF16FromFloat32(g), BF16FromFloat32(u)
		})
	return true
}

// axpbyCPU writes y = alpha·x + beta·y (beta 0: y not read; alpha 0: x not read).
func axpbyCPU(y, x []float32, alpha, beta float32) {
	x = x[:len(y)]
	switch {
	case alpha == 0 && beta == 0:
		clear(y)
	case alpha == 0:
		for i := range y {
			y[i] *= beta
		}
	case beta == 0:
		for i, v := range x {
			y[i] = alpha * v
		}
	case beta == 1 && alpha == 1:
		for i, v := range x {
			y[i] += v
		}
	case beta == 1:
		for i, v := range x {
			y[i] += alpha * v
		}
	default:
		for i, v := range x {
			y[i] = alpha*v + beta*y[i]
		}
	}
}

// mulCPU writes y = a ⊙ b.
func mulCPU(y, a, b []float32) {
	a, b = a[:len(y)], b[:len(y)]
	for i := range y {
		y[i] = a[i] * b[i]
	}
}
