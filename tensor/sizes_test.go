package tensor_test

import (
	"errors"
	"math"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestSizeOverflow: sizes whose element or byte count overflows int, and offsets where
// off+n overflows, are errors, never a tensor over too little storage or a panic.
func TestSizeOverflow(t *testing.T) {
	cpu := tensor.CPU()
	empty := tensor.Must(tensor.New(cpu, tensor.Float32, 0))
	st, _ := tensor.Must(tensor.New(cpu, tensor.Float32, 4)).Storage()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"New float32 2^62+1", func() error { _, err := tensor.New(cpu, tensor.Float32, 1<<62+1); return err }},
		{"New int32 [2^31 2^31]", func() error { _, err := tensor.New(cpu, tensor.Int32, 1<<31, 1<<31); return err }},
		{"New uint8 MaxInt", func() error { _, err := tensor.New(cpu, tensor.Uint8, math.MaxInt); return err }},
		{"New [MaxInt MaxInt 0]", func() error { _, err := tensor.New(cpu, tensor.Float32, math.MaxInt, math.MaxInt, 0); return err }},
		{"New [0 MaxInt MaxInt]", func() error { _, err := tensor.New(cpu, tensor.Float32, 0, math.MaxInt, math.MaxInt); return err }},
		{"New on device 2^62+1", func() error { _, err := tensor.New(hostile.Device(), tensor.Float32, 1<<62+1); return err }},
		{"Reshape empty [2^32 2^32]", func() error { _, err := empty.Reshape(1<<32, 1<<32); return err }},
		{"Reshape empty [2^32 2^32 -1]", func() error { _, err := empty.Reshape(1<<32, 1<<32, -1); return err }},
		{"Reshape empty [0 2^40 2^40]", func() error { _, err := empty.Reshape(0, 1<<40, 1<<40); return err }},
		{"FromFloat32 [0 2^40 2^40]", func() error { _, err := tensor.FromFloat32(nil, 0, 1<<40, 1<<40); return err }},
		{"Upload at MaxInt", func() error { return cpu.Upload(st, math.MaxInt, make([]byte, 4)) }},
		{"Upload at MaxInt-2", func() error { return cpu.Upload(st, math.MaxInt-2, make([]byte, 4)) }},
		{"Download at MaxInt-2", func() error { return cpu.Download(make([]byte, 4), st, math.MaxInt-2) }},
		{"Copy at MaxInt-2", func() error { return cpu.Copy(st, math.MaxInt-2, st, 0, 4) }},
		{"Copy n MaxInt", func() error { return cpu.Copy(st, 4, st, 0, math.MaxInt) }},
		{"Alloc MaxInt", func() error { _, err := cpu.Alloc(math.MaxInt); return err }},
		{"Alloc MaxHostBytes+1", func() error { _, err := cpu.Alloc(tensor.MaxHostBytes + 1); return err }},
	} {
		err := tc.call()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		var te *tensor.Error
		if !errors.As(err, &te) || !(errors.Is(err, tensor.ErrShape) || errors.Is(err, tensor.ErrParam) || errors.Is(err, tensor.ErrDevice)) {
			t.Errorf("%s: %v is not a *tensor.Error wrapping ErrShape, ErrParam or ErrDevice", tc.name, err)
		}
	}
	if n := tensor.Shape([]int{1 << 62, 4}).NumElements(); n != -1 {
		t.Errorf("Shape[2^62 4].NumElements() = %d, want -1", n)
	}
	if n, err := tensor.CheckSize("", "", 3, 0, 5); n != 0 || err != nil {
		t.Errorf("CheckSize(3, 0, 5) = %d, %v", n, err)
	}
}

// TestZeroTensors: nil and zero-value tensors are ErrShape errors at every entry point,
// and the accessors describe them without panicking.
func TestZeroTensors(t *testing.T) {
	cpu := tensor.CPU()
	x := hostile.F32(2, 3)
	for _, z := range []*tensor.Tensor{nil, {}} {
		for name, call := range map[string]func() error{
			"To":               func() error { _, err := tensor.To(cpu, z); return err },
			"NewLike":          func() error { _, err := tensor.NewLike(z, tensor.Float32); return err },
			"CheckDType":       func() error { return tensor.CheckDType("op", "t", z, tensor.Float32) },
			"CheckShape":       func() error { return tensor.CheckShape("op", "t", z) },
			"CheckSameShape":   func() error { return tensor.CheckSameShape("op", "a", x, "b", z) },
			"CheckTensor":      func() error { return tensor.CheckTensor("op", "t", z) },
			"CopyInto":         func() error { return tensor.CopyInto(x, z) },
			"Reshape":          func() error { _, err := z.Reshape(-1); return err },
			"Rows":             func() error { _, err := z.Rows(0, 0); return err },
			"Float32s":         func() error { _, err := z.Float32s(); return err },
			"MaskedSum":        func() error { _, _, err := tensor.MaskedSum(x, z); return err },
			"CheckSameBackend": func() error { return tensor.CheckSameBackend("op", []string{"a", "b"}, x, z) },
		} {
			err := call()
			if z == nil && name == "CheckSameBackend" { // nil is an optional tensor left out
				if err != nil {
					t.Errorf("CheckSameBackend with a nil entry: %v", err)
				}
				continue
			}
			if !errors.Is(err, tensor.ErrShape) {
				t.Errorf("%s(%v): %v, want ErrShape", name, z, err)
			}
		}
		if z.Dim(0) != 0 || z.Len() != 0 || z.Backend() != nil || z.IsHost() || z.Release() != nil || z.String() == "" {
			t.Errorf("accessors of %v", z)
		}
	}
	if x.Dim(5) != 0 || x.Dim(-3) != 0 || x.Dim(-1) != 3 {
		t.Errorf("Dim out of range: %d %d %d", x.Dim(5), x.Dim(-3), x.Dim(-1))
	}
}
