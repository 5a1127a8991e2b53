package tensor_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestBF16HostMatchesReference: on the CPU backend the norms and RoPE with bfloat16
// activations equal the reference (widen, nnref in float32, round once) bit for bit, and GELU
// and GELUTanh the CPU's own float32 run on the widened values, rounded once; mixed-dtype
// parameters (a float32 weight with bfloat16 activations) too. Shapes cut across the host blocks: more
// rows than one block of 16384 elements, a row wider than a block.
func TestBF16HostMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = tensor.BF16FromFloat32(float32(r.NormFloat64() + 0.5)).Float32()
		}
		return v
	}
	bf := func(v []float32, s ...int) *tensor.Tensor {
		b := make([]tensor.BF16, len(v))
		for i, x := range v {
			b[i] = tensor.BF16FromFloat32(x)
		}
		return tensor.Must(tensor.FromBF16(b, s...))
	}
	same := func(name string, got *tensor.Tensor, want []float32, round bool) {
		t.Helper()
		var g []float32
		if got.DType() == tensor.BFloat16 {
			b, _ := got.BF16s()
			for _, x := range b {
				g = append(g, x.Float32())
			}
		} else {
			g, _ = got.Float32s()
		}
		for i, w := range want {
			if round {
				w = tensor.BF16FromFloat32(w).Float32()
			}
			if math.Float32bits(g[i]) != math.Float32bits(w) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g[i], w)
			}
		}
	}
	for _, d := range []int{96, 20000} {
		rows := 40000 / d
		xv, wv, bv, dyv := randv(rows*d), randv(d), randv(d), randv(rows*d)
		x, dy := bf(xv, rows, d), bf(dyv, rows, d)
		for _, wbf := range []bool{false, true} {
			w, b := tensor.Must(tensor.FromFloat32(wv, d)), tensor.Must(tensor.FromFloat32(bv, d))
			if wbf {
				w, b = bf(wv, d), bf(bv, d)
			}
			y, ly, dx, ldx := bf(make([]float32, rows*d), rows, d), bf(make([]float32, rows*d), rows, d),
				bf(make([]float32, rows*d), rows, d), bf(make([]float32, rows*d), rows, d)
			dw, ldw, ldb := tensor.Must(tensor.FromFloat32(make([]float32, d), d)), tensor.Must(tensor.FromFloat32(make([]float32, d), d)),
				tensor.Must(tensor.FromFloat32(make([]float32, d), d))
			in := tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: 1e-6}
			for _, err := range []error{tensor.RMSNorm(y, x, w, 1e-6), tensor.LayerNorm(ly, x, w, b, 1e-6),
				tensor.RMSNormBackward(dx, dw, in), tensor.LayerNormBackward(ldx, ldw, ldb, in)} {
				if err != nil {
					t.Fatal(err)
				}
			}
			ry, rdx, rdw := make([]float32, rows*d), make([]float32, rows*d), make([]float32, d)
			nnref.RMSNorm(rows, d, xv, wv, 1e-6, ry)
			nnref.RMSNormBackward(rows, d, xv, wv, dyv, 1e-6, rdx, rdw, false)
			rly, rldx, rldw, rldb := make([]float32, rows*d), make([]float32, rows*d), make([]float32, d), make([]float32, d)
			nnref.LayerNorm(rows, d, xv, wv, bv, 1e-6, rly)
			nnref.LayerNormBackward(rows, d, xv, wv, dyv, 1e-6, rldx, rldw, rldb, false)
			same("rms y", y, ry, true)
			same("rms dx", dx, rdx, true)
			same("rms dw", dw, rdw, false)
			same("ln y", ly, rly, true)
			same("ln dx", ldx, rldx, true)
			same("ln dw", ldw, rldw, false)
			same("ln db", ldb, rldb, false)
		}
	}
	// RoPE with sections, in place; GELU and GELUTanh forward and backward.
	const tn, h, hd = 300, 4, 32
	pos := make([]int32, 3*tn)
	for i := range pos {
		pos[i] = int32(r.IntN(5000))
	}
	xv := randv(tn * h * hd)
	x := bf(xv, tn, h, hd)
	cfg := tensor.RoPEConfig{Theta: 1e6, Sections: []int{4, 6, 6}}
	if err := tensor.RoPE(x, x, tensor.Must(tensor.FromInt32(pos, 3, tn)), cfg); err != nil {
		t.Fatal(err)
	}
	ry := make([]float32, len(xv))
	nnref.RoPE(tn, h, hd, xv, [][]int32{pos[:tn], pos[tn : 2*tn], pos[2*tn:]}, cfg.Sections, cfg.Theta, false, ry)
	same("rope y", x, ry, true)
	for _, a := range []tensor.Activation{tensor.GELU, tensor.GELUTanh} {
		xv, dyv := randv(40000), randv(40000)
		y, dy := bf(make([]float32, len(xv)), len(xv)), bf(dyv, len(xv))
		xt := bf(xv, len(xv))
		if err := tensor.Activate(y, xt, a); err != nil {
			t.Fatal(err)
		}
		if err := tensor.ActivateBackward(dy, tensor.ActivationGrad{X: xt, DY: dy, Activation: a}); err != nil {
			t.Fatal(err)
		}
		ry, rdx := make([]float32, len(xv)), make([]float32, len(xv))
		fy, fdx := tensor.Must(tensor.FromFloat32(ry, len(xv))), tensor.Must(tensor.FromFloat32(rdx, len(xv)))
		fx, fdy := tensor.Must(tensor.FromFloat32(xv, len(xv))), tensor.Must(tensor.FromFloat32(dyv, len(xv)))
		if err := tensor.Activate(fy, fx, a); err != nil {
			t.Fatal(err)
		}
		if err := tensor.ActivateBackward(fdx, tensor.ActivationGrad{X: fx, DY: fdy, Activation: a}); err != nil {
			t.Fatal(err)
		}
		same(a.String()+" y", y, ry, true)
		same(a.String()+" dx", dy, rdx, true)
	}
}
