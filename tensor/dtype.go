package tensor

import (
	"math"
	"strings"

	"github.com/mtrl-go/mtrl/internal/enum"
)

// DType is the element type of a tensor.
type DType uint8

// The element types every backend supports.
const (
	Float32  DType = iota + 1 // IEEE-754 binary32
	BFloat16                  // brain float: the upper 16 bits of a float32
	Int32                     // token ids, counts
	Uint8                     // image pixels
)

// Size returns the number of bytes one element occupies.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case BFloat16:
		return 2
	case Uint8:
		return 1
	}
	return 0
}

var dtypes = enum.Table[DType]{Type: "tensor.DType", Noun: "dtype",
	Names: []string{"float32", "bfloat16", "int32", "uint8"}, First: Float32,
	Errorf: Errorf, Sentinel: ErrDType}

// String returns the lower-case name used by ParseDType ("float32", "bfloat16", ...).
func (d DType) String() string { return dtypes.String(d) }

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return dtypes.Valid(d) }

// ParseDType is the inverse of DType.String. It also accepts "bf16" and "f32".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float32", "f32", "fp32":
		return Float32, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int32", "i32":
		return Int32, nil
	case "uint8", "u8":
		return Uint8, nil
	}
	return 0, Errorf(ErrDType, "tensor.ParseDType", "s", "unknown dtype %q", s)
}

// MarshalText implements encoding.TextMarshaler with the name String returns; a value outside
// the defined constants is an error.
func (d DType) MarshalText() ([]byte, error) { return dtypes.MarshalText(d) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseDType, so configuration files
// (JSON, YAML) hold the name.
func (d *DType) UnmarshalText(b []byte) error { return enum.UnmarshalText(d, b, ParseDType) }

// BF16 is one bfloat16 value: the upper half of a float32's bits.
type BF16 uint16

// BF16FromFloat32 rounds f to the nearest bfloat16 (ties to even). NaN stays NaN.
func BF16FromFloat32(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return BF16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BF16(b >> 16)
}

// Float32 widens the value exactly.
func (h BF16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }
