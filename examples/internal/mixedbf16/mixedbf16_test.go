package mixedbf16

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestConverterHost: on the host, Convert, RoundTo, Store and Widen are the scalar
// conversions (BF16FromFloat32 rounds to nearest even, widening is exact) element by element,
// on values chosen to hit ties, subnormals, infinities and NaN; a float32 tensor is its own
// widening and a bfloat16 one its own store; mismatched sizes and dtypes are errors.
func TestConverterHost(t *testing.T) {
	vals := []float32{1.5, -0.25, 3, 1e-3, 1 + 1.0/256, 1 + 3.0/256, math.Float32frombits(0x00012345), float32(math.Inf(-1)), float32(math.NaN()), 65504.7}
	c := NewConverter(tensor.CPU())
	require.True(t, c.OnHost())
	x := tensor.Must(tensor.FromFloat32(vals, 2, 5))
	st, err := c.Store(x)
	require.NoError(t, err)
	require.Equal(t, tensor.BFloat16, st.DType())
	require.Equal(t, []int{2, 5}, []int(st.Shape()))
	b, _ := st.BF16s()
	for i, v := range vals {
		require.Equal(t, tensor.BF16FromFloat32(v), b[i], "%d", i)
	}
	w, err := c.Widen(st)
	require.NoError(t, err)
	require.Equal(t, tensor.Float32, w.DType())
	r := tensor.Must(tensor.FromFloat32(append([]float32(nil), vals...), 10))
	require.NoError(t, c.RoundTo(r, r))
	got, _ := w.Float32s()
	rv, _ := r.Float32s()
	for i := range vals {
		want := b[i].Float32()
		if math.IsNaN(float64(want)) {
			require.True(t, math.IsNaN(float64(got[i])) && math.IsNaN(float64(rv[i])), "%d", i)
			continue
		}
		require.Equal(t, want, got[i], "%d", i)
		require.Equal(t, want, rv[i], "%d", i)
	}
	same, err := c.Widen(x)
	require.NoError(t, err)
	require.Same(t, x, same)
	same, err = c.Store(st)
	require.NoError(t, err)
	require.Same(t, st, same)

	require.ErrorIs(t, c.Convert(tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, 3)), x), tensor.ErrShape)
	require.ErrorIs(t, c.Convert(tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 10)), x), tensor.ErrDType)
	require.ErrorIs(t, c.RoundTo(tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 3)), x), tensor.ErrShape)
	_, err = c.Scratch(2, 4)
	require.ErrorIs(t, err, tensor.ErrParam)
	s, err := c.Scratch(1, 4)
	require.NoError(t, err)
	require.Equal(t, 4, s.Len())
}

// TestCopies: Refresh rounds each master into its copy (a matrix packed as bfloat16, a vector
// as float32 holding bfloat16 values), again after the masters change.
func TestCopies(t *testing.T) {
	masters := map[string]*tensor.Tensor{
		"w": tensor.Must(tensor.FromFloat32([]float32{1.001, -2.5, 0.3, 7, 1e-5, -0.1}, 2, 3)),
		"b": tensor.Must(tensor.FromFloat32([]float32{0.123456, 9.87}, 2)),
	}
	p := NewCopies(NewConverter(tensor.CPU()), func(name string) *tensor.Tensor { return masters[name] })
	mat, err := p.Mat("w")
	require.NoError(t, err)
	vec, err := p.Vec("b")
	require.NoError(t, err)
	for step := range 2 {
		require.NoError(t, p.Refresh())
		wb, err := mat.Weight().BF16s()
		require.NoError(t, err)
		wm, _ := masters["w"].Float32s()
		for i, v := range wm {
			require.Equal(t, tensor.BF16FromFloat32(v), wb[i], "step %d w[%d]", step, i)
		}
		vv, _ := vec.Float32s()
		bm, _ := masters["b"].Float32s()
		for i, v := range bm {
			require.Equal(t, tensor.BF16FromFloat32(v).Float32(), vv[i], "step %d b[%d]", step, i)
		}
		for i := range wm { // an optimizer step
			wm[i] *= 1.01
		}
		bm[0] += 0.5
	}
}
