//go:build cuda

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// normShapes are the (rows, D) of TestNormShapes: the row kernels' register path (D ≤ 4096,
// one to sixteen elements per thread, the last one partial or not) and the loop beyond it
// (4097, 9000); the weight gradient's 32-column tiles (D not a multiple of 32) and 128-row steps
// (rows 128, 129, 260); one row, and fewer rows than blocks.
var normShapes = [][2]int{{1, 1}, {3, 31}, {70, 33}, {5, 200}, {2, 256}, {3, 257}, {128, 64}, {129, 1000},
	{260, 40}, {2, 4096}, {1, 4097}, {3, 9000}}

// ropeShapes are the (tokens, heads, D) of TestNormShapes: fewer pairs than a block, a half
// that does not divide the block (D 80, Qwen2-VL's vision heads), more than 256 pairs per head
// (D 600, 514) and the 7B model's 32 heads of 128.
var ropeShapes = [][3]int{{1, 1, 2}, {3, 5, 16}, {2, 3, 80}, {4, 2, 600}, {1, 3, 514}, {5, 32, 128}}

// TestNormShapes runs RMSNorm, LayerNorm and RoPE forward and backward at the shapes above on
// the device and on the CPU backend, in float32 and bfloat16, the inputs row views that start
// one row into their storage (an odd element offset for odd D). The device's outputs must equal
// the CPU's within float32 rounding (the row statistics are float64 sums in another order), one
// bfloat16 rounding more for bfloat16 outputs.
func TestNormShapes(t *testing.T) {
	be := device(t)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, s := range normShapes {
			t.Run(fmt.Sprintf("norm/%v/rows=%d/d=%d", dt, s[0], s[1]), func(t *testing.T) {
				got, want := normOutputs(t, be, dt, s[0], s[1]), normOutputs(t, tensor.CPU(), dt, s[0], s[1])
				closeOutputs(t, got, want, dt)
			})
		}
		for _, s := range ropeShapes {
			t.Run(fmt.Sprintf("rope/%v/t=%d/h=%d/d=%d", dt, s[0], s[1], s[2]), func(t *testing.T) {
				got, want := ropeOutputs(t, be, dt, s[0], s[1], s[2]), ropeOutputs(t, tensor.CPU(), dt, s[0], s[1], s[2])
				closeOutputs(t, got, want, dt)
			})
		}
	}
}

// output is one named result as float32 values; bf16 says it was rounded to bfloat16.
type output struct {
	name string
	v    []float32
	bf16 bool
}

func closeOutputs(t *testing.T, got, want []output, dt tensor.DType) {
	t.Helper()
	for i := range got {
		g, w := got[i].v, want[i].v
		tol := 1e-5
		if got[i].bf16 {
			tol = 1.0 / 128 // a rounding on each side of values within float32 of each other
		}
		for j := range w {
			d := math.Abs(float64(g[j]) - float64(w[j]))
			if !(d <= tol*(math.Abs(float64(w[j]))+1e-2)) {
				t.Fatalf("%s[%d] = %g, the CPU's %g (|diff| %.3g)", got[i].name, j, g[j], w[j], d)
			}
		}
	}
}

// rowView uploads v (rows+1 rows of n elements) as dtype dt and returns the view of its last
// rows rows.
func rowView(t *testing.T, b tensor.Backend, dt tensor.DType, v []float32, rows int, inner ...int) *tensor.Tensor {
	t.Helper()
	shape := append([]int{rows + 1}, inner...)
	var x *tensor.Tensor
	if dt == tensor.Float32 {
		x = up(t, b, v, shape...)
	} else {
		h := make([]tensor.BF16, len(v))
		for i, f := range v {
			h[i] = tensor.BF16FromFloat32(f)
		}
		x = tensor.Must(tensor.To(b, tensor.Must(tensor.FromBF16(h, shape...))))
	}
	return tensor.Must(x.Rows(1, rows+1))
}

// normOutputs runs both norms forward and backward (the weight and bias gradients accumulated
// into nonzero values) on b.
func normOutputs(t *testing.T, b tensor.Backend, dt tensor.DType, rows, d int) []output {
	r := rand.New(rand.NewPCG(uint64(rows), uint64(d)))
	xv, dyv := randn(r, (rows+1)*d, 2), randn(r, (rows+1)*d, 1)
	for i := range xv {
		xv[i] += 1.5 // LayerNorm must remove a mean
	}
	wv, bv, dw0, db0 := randn(r, d, 1), randn(r, d, 1), randn(r, d, 1), randn(r, d, 1)
	x, dy := rowView(t, b, dt, xv, rows, d), rowView(t, b, dt, dyv, rows, d)
	w, bias := up(t, b, wv, d), up(t, b, bv, d)
	bf := dt == tensor.BFloat16
	var out []output
	for _, layer := range []bool{false, true} {
		name := map[bool]string{false: "rms ", true: "ln "}[layer]
		y, dx := tensor.Must(tensor.New(b, dt, rows, d)), tensor.Must(tensor.New(b, dt, rows, d))
		dw, db := up(t, b, dw0, d), up(t, b, db0, d)
		in := tensor.NormGrad{X: x, Weight: w, DY: dy, Eps: 1e-6, Accumulate: true}
		var err error
		if layer {
			if err = tensor.LayerNorm(y, x, w, bias, 1e-6); err == nil {
				err = tensor.LayerNormBackward(dx, dw, db, in)
			}
		} else if err = tensor.RMSNorm(y, x, w, 1e-6); err == nil {
			err = tensor.RMSNormBackward(dx, dw, in)
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, output{name + "y", host(t, y), bf}, output{name + "dx", host(t, dx), bf}, output{name + "dw", host(t, dw), false})
		if layer {
			out = append(out, output{name + "db", host(t, db), false})
		}
	}
	return out
}

// ropeOutputs runs RoPE and its backward on b, with Qwen2-VL's sections when D/2 splits into
// three.
func ropeOutputs(t *testing.T, b tensor.Backend, dt tensor.DType, tn, h, d int) []output {
	r := rand.New(rand.NewPCG(uint64(tn*h), uint64(d)))
	cfg := tensor.RoPEConfig{Theta: 1e6}
	half, ns := d/2, 1
	if half >= 3 {
		cfg.Sections = []int{half / 4, half / 4, half - 2*(half/4)}
		ns = 3
	}
	pos := make([]int32, ns*tn)
	for i := range pos {
		pos[i] = int32(r.IntN(4096))
	}
	var p *tensor.Tensor
	if ns == 3 {
		p = upI(t, b, pos, ns, tn)
	} else {
		p = upI(t, b, pos, tn)
	}
	x, dy := rowView(t, b, dt, randn(r, (tn+1)*h*d, 1), tn, h, d), rowView(t, b, dt, randn(r, (tn+1)*h*d, 1), tn, h, d)
	y, dx := tensor.Must(tensor.New(b, dt, tn, h, d)), tensor.Must(tensor.New(b, dt, tn, h, d))
	if err := tensor.RoPE(y, x, p, cfg); err != nil {
		t.Fatal(err)
	}
	if err := tensor.RoPEBackward(dx, tensor.RoPEGrad{DY: dy, Positions: p, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	bf := dt == tensor.BFloat16
	return []output{{"rope y", host(t, y), bf}, {"rope dx", host(t, dx), bf}}
}
