package tensor_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestDropValues checks that a weight held only as its panels (DropValues, with and without
// KeepTransposed) computes exactly what the weight with its values computes — Linear,
// LinearBackward and the fused LM head, also with the pure-Go reference forced — that Row and
// Values read the values back, and that the LM head's backward without dweight writes the same
// dhidden.
func TestDropValues(t *testing.T) {
	if !gemm.SIMD() {
		t.Skip("no vector GEMM: nothing is packed")
	}
	r := rand.New(rand.NewPCG(5, 6))
	randn := func(s ...int) *tensor.Tensor {
		x := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...))
		v, _ := x.Float32s()
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return x
	}
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	vals := func(x *tensor.Tensor) []float32 {
		v, err := x.Float32s()
		must(err)
		return v
	}
	const m, n, k = 7, 2100, 70 // three vocabulary chunks, a partial panel
	w, x, dy := randn(n, k), randn(m, k), randn(m, n)
	ys := make([]int32, m)
	for i := range ys {
		ys[i] = int32(r.IntN(n))
	}
	y := tensor.Must(tensor.FromInt32(ys, m))
	gl := randn(m)
	// run returns everything the weight computes into: y, dx, dw, logp, entropy, dhidden.
	run := func(p *tensor.PackedWeight, dweight bool) [][]float32 {
		out := zeros(m, n)
		must(tensor.Linear(out, x, p))
		dx, dw := zeros(m, k), zeros(n, k)
		must(tensor.LinearBackward(tensor.LinearGradOut{DX: dx, DWeight: dw}, tensor.LinearGrad{X: x, Weight: p, DY: dy}))
		in := tensor.LMHeadInputs{Hidden: x, Weight: p, Targets: y, Temperature: 0.9}
		lp, ent := zeros(m), zeros(m)
		must(tensor.LMHeadLogProbs(lp, ent, in))
		dh := zeros(m, k)
		var dwh *tensor.Tensor
		if dweight {
			dwh = zeros(n, k)
		}
		must(tensor.LMHeadBackward(dh, dwh, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl}))
		return [][]float32{vals(out), vals(dx), vals(dw), vals(lp), vals(ent), vals(dh)}
	}
	held, err := tensor.PackWeight(w)
	must(err)
	for _, forceGo := range []bool{false, true} {
		var want [][]float32
		func() {
			if forceGo {
				defer dispatch.ForceGo()()
			}
			want = run(held, true)
		}()
		for _, keep := range []bool{true, false} {
			p, err := tensor.PackWeight(w)
			must(err)
			p.KeepTransposed(keep)
			must(p.DropValues())
			if p.Weight() != nil {
				t.Fatal("Weight after DropValues is not nil")
			}
			if nn, kk := p.Dims(); nn != n || kk != k {
				t.Fatalf("Dims = %d, %d, want %d, %d", nn, kk, n, k)
			}
			func() {
				if forceGo {
					defer dispatch.ForceGo()()
				}
				for pass := range 2 { // the second reuses (or repacks) the transposed panels
					got := run(p, false)
					for i, name := range []string{"y", "dx", "dw", "logp", "entropy", "dhidden"} {
						if !slices.Equal(got[i], want[i]) {
							t.Fatalf("go=%v keep=%v pass %d: %s differs from the held weight's", forceGo, keep, pass, name)
						}
					}
				}
			}()
			v, err := p.Values()
			must(err)
			if !slices.Equal(vals(v), vals(w)) {
				t.Fatal("Values differ from the weight")
			}
			row := make([]float32, k)
			must(p.Row(n-1, row))
			if !slices.Equal(row, vals(w)[(n-1)*k:]) {
				t.Fatal("Row differs from the weight's")
			}
			if err := p.Repack(); !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("Repack after DropValues: %v, want ErrParam", err)
			}
			if err := p.Row(n, row); !errors.Is(err, tensor.ErrParam) {
				t.Fatalf("Row(%d): %v, want ErrParam", n, err)
			}
		}
	}
}
