package hfmodel

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nlpodyssey/safetensors"

	"github.com/mtrl-go/mtrl/tensor"
)

// DType is the storage type of a checkpoint tensor.
type DType int

// The storage types of Hugging Face checkpoints this package reads and writes. The zero DType is
// not one of them.
const (
	Float32 DType = iota + 1
	BFloat16
	Float16
)

// String is PyTorch's name, as config.json's torch_dtype and the -dtype flag spell it.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the bytes per element.
func (d DType) Size() int {
	if d == Float32 {
		return 4
	}
	return 2
}

// ParseDType reads PyTorch's name of a dtype ("float32", "bfloat16", "float16").
func ParseDType(s string) (DType, error) {
	for _, d := range []DType{Float32, BFloat16, Float16} {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, tensor.Errorf(tensor.ErrDType, "hfmodel.ParseDType", "", "%q is not float32, bfloat16 or float16", s)
}

func (d DType) safetensors() safetensors.DType {
	switch d {
	case BFloat16:
		return safetensors.BF16
	case Float16:
		return safetensors.F16
	}
	return safetensors.F32
}

func fromSafetensors(d safetensors.DType) (DType, bool) {
	switch d {
	case safetensors.F32:
		return Float32, true
	case safetensors.BF16:
		return BFloat16, true
	case safetensors.F16:
		return Float16, true
	}
	return 0, false
}

// Tensor is one weight of a checkpoint: its Hugging Face name, storage type, shape and
// little-endian bytes. For an opened checkpoint, Data is a view of the memory-mapped file, valid
// until Checkpoint.Close and read-only.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Len is the number of elements.
func (t *Tensor) Len() int { return numel(t.Shape) }

// Float32s converts the values to a new float32 slice (exactly: bfloat16 and float16 widen
// without rounding).
func (t *Tensor) Float32s() []float32 {
	out := make([]float32, t.Len())
	switch t.DType {
	case Float32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case BFloat16:
		for i := range out {
			out[i] = tensor.BF16(binary.LittleEndian.Uint16(t.Data[2*i:])).Float32()
		}
	case Float16:
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out
}

// NewTensor stores float32 values as dtype, rounding to nearest even for the 16-bit types.
func NewTensor(name string, shape []int, vals []float32, dtype DType) (*Tensor, error) {
	const op = "hfmodel.NewTensor"
	if dtype.Size() == 0 || dtype < Float32 || dtype > Float16 {
		return nil, tensor.Errorf(tensor.ErrDType, op, name, "dtype %v", dtype)
	}
	if numel(shape) != len(vals) {
		return nil, tensor.Errorf(tensor.ErrShape, op, name, "%d values for shape %v", len(vals), shape)
	}
	data := make([]byte, len(vals)*dtype.Size())
	for i, v := range vals {
		switch dtype {
		case Float32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		case BFloat16:
			binary.LittleEndian.PutUint16(data[2*i:], uint16(tensor.BF16FromFloat32(v)))
		case Float16:
			binary.LittleEndian.PutUint16(data[2*i:], f32ToF16(v))
		}
	}
	return &Tensor{Name: name, DType: dtype, Shape: append([]int(nil), shape...), Data: data}, nil
}

// convert returns t stored as dtype (t itself when it already is).
func (t *Tensor) convert(dtype DType) (*Tensor, error) {
	if t.DType == dtype {
		return t, nil
	}
	return NewTensor(t.Name, t.Shape, t.Float32s(), dtype)
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// f16ToF32 widens an IEEE half exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// subnormal: mant × 2^-24, exact in float32
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// f32ToF16 rounds to the nearest IEEE half, ties to even, as PyTorch's .half() does.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 // NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // rounds to ±0
		}
		m := mant | 0x800000 // implicit bit
		shift := uint(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r) // a carry into the exponent field is the right answer
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(r)
}
