package hostile

import (
	"fmt"
	"math"
	"reflect"

	"github.com/mtrl-go/mtrl/tensor"
)

// F32 returns a fresh float32 CPU tensor of the given shape holding small distinct values.
func F32(shape ...int) *tensor.Tensor {
	data := make([]float32, tensor.Shape(shape).NumElements())
	for i := range data {
		data[i] = float32(i%7)*0.25 - 0.5
	}
	return tensor.Must(tensor.FromFloat32(data, shape...))
}

// Ones returns a fresh float32 CPU tensor of ones (a full response mask).
func Ones(shape ...int) *tensor.Tensor {
	t := F32(shape...)
	v, _ := t.Float32s()
	for i := range v {
		v[i] = 1
	}
	return t
}

// I32 returns a fresh int32 CPU tensor holding data.
func I32(data []int32, shape ...int) *tensor.Tensor {
	return tensor.Must(tensor.FromInt32(append([]int32(nil), data...), shape...))
}

// U8 returns a fresh uint8 CPU tensor of the given shape (an image or a batch of images).
func U8(shape ...int) *tensor.Tensor {
	data := make([]uint8, tensor.Shape(shape).NumElements())
	for i := range data {
		data[i] = uint8(i * 37)
	}
	return tensor.Must(tensor.FromUint8(data, shape...))
}

// OnDevice copies t to Device().
func OnDevice(t *tensor.Tensor) *tensor.Tensor { return tensor.Must(tensor.To(Device(), t)) }

// tensors are the built-in hostile tensors, a plausible float32 [2, 3] first.
func tensors() []gen {
	mk := func(desc string, f func() *tensor.Tensor) gen {
		return gen{desc, func() reflect.Value { return reflect.ValueOf(f()) }}
	}
	nonFinite := func() *tensor.Tensor {
		t := F32(2, 3)
		v, _ := t.Float32s()
		v[0], v[2], v[4] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
		return t
	}
	bf16 := func() *tensor.Tensor {
		d := make([]tensor.BF16, 6)
		for i := range d {
			d[i] = tensor.BF16FromFloat32(float32(i) - 2)
		}
		return tensor.Must(tensor.FromBF16(d, 2, 3))
	}
	view := func() *tensor.Tensor { return tensor.Must(F32(3, 3).Rows(1, 3)) }
	out := []gen{
		mk("f32[2 3]", func() *tensor.Tensor { return F32(2, 3) }),
		{"nil tensor", func() reflect.Value { return reflect.ValueOf((*tensor.Tensor)(nil)) }},
		mk("zero Tensor{}", func() *tensor.Tensor { return &tensor.Tensor{} }),
		mk("scalar", func() *tensor.Tensor { return tensor.Scalar(1) }),
		mk("ones[2 3]", func() *tensor.Tensor { return Ones(2, 3) }),
		mk("non-finite f32[2 3]", nonFinite),
		mk("bf16[2 3]", bf16),
		mk("i32[2 3] extremes", func() *tensor.Tensor {
			return I32([]int32{0, 1, -1, math.MaxInt32, math.MinInt32, 2}, 2, 3)
		}),
		mk("i32[2] ids", func() *tensor.Tensor { return I32([]int32{0, 0}, 2) }),
		mk("u8[2 3]", func() *tensor.Tensor { return U8(2, 3) }),
		mk("u8[4 5 3] image", func() *tensor.Tensor { return U8(4, 5, 3) }),
		mk("u8[2 4 5 3] batch", func() *tensor.Tensor { return U8(2, 4, 5, 3) }),
		mk("device f32[2 3]", func() *tensor.Tensor { return OnDevice(F32(2, 3)) }),
		mk("rows view f32[2 3]", view),
		mk("f32[2 3 4]", func() *tensor.Tensor { return F32(2, 3, 4) }),
		mk("f32[2]", func() *tensor.Tensor { return F32(2) }),
		mk("f32[3]", func() *tensor.Tensor { return F32(3) }),
		mk("f32[1 3]", func() *tensor.Tensor { return F32(1, 3) }),
	}
	for _, s := range [][]int{{0}, {0, 0}, {2, 0}, {0, 3}, {2, 0, 4}, {2, 3, 0}} {
		out = append(out, mk(fmt.Sprintf("empty f32%v", s), func() *tensor.Tensor { return F32(s...) }))
	}
	return out
}
