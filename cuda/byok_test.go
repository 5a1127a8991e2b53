//go:build cuda

package cuda_test

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestOwnKernelValidation: every way to get a bring-your-own-kernels call wrong is an error
// wrapping the right sentinel, and nothing reaches the device.
func TestOwnKernelValidation(t *testing.T) {
	b := device(t)
	other := device(t)
	if _, err := b.LoadModule("junk", "not ptx"); !errors.Is(err, tensor.ErrParam) {
		t.Errorf("LoadModule(junk): %v, want ErrParam", err)
	}
	mod, err := b.LoadModule("axpy", axpyPTX)
	if err != nil {
		t.Fatal(err)
	}
	f32 := cuda.TensorParam(tensor.Float32)
	for name, params := range map[string][]cuda.Param{
		"too few":      {f32, f32, cuda.Float32Param},
		"int for f32":  {f32, f32, cuda.IntParam, cuda.IntParam},
		"f32 for ptr":  {cuda.Float32Param, f32, cuda.Float32Param, cuda.IntParam},
		"int32 for n":  {f32, f32, cuda.Float32Param, cuda.Int32Param},
		"zero param":   {f32, {}, cuda.Float32Param, cuda.IntParam},
		"extra params": {f32, f32, cuda.Float32Param, cuda.IntParam, cuda.IntParam},
	} {
		if _, err := mod.Kernel("byok_axpy_f32", params...); !errors.Is(err, tensor.ErrParam) {
			t.Errorf("Kernel(%s): %v, want ErrParam", name, err)
		}
	}
	if _, err := mod.Kernel("nope", f32); !errors.Is(err, tensor.ErrParam) {
		t.Errorf("Kernel(nope): %v, want ErrParam", err)
	}
	k, err := mod.Kernel("byok_axpy_f32", f32, f32, cuda.Float32Param, cuda.IntParam)
	if err != nil {
		t.Fatal(err)
	}
	on := func(bk tensor.Backend, dt tensor.DType) *tensor.Tensor {
		return tensor.Must(tensor.New(bk, dt, 8))
	}
	y, x := on(b, tensor.Float32), on(b, tensor.Float32)
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}}
	for _, c := range []struct {
		name string
		cfg  cuda.LaunchConfig
		args []any
		want error
	}{
		{"ok", cfg, []any{y, x, float32(1), 8}, nil},
		{"host tensor", cfg, []any{y, on(tensor.CPU(), tensor.Float32), float32(1), 8}, tensor.ErrBackend},
		{"other device", cfg, []any{y, on(other, tensor.Float32), float32(1), 8}, tensor.ErrBackend},
		{"dtype", cfg, []any{y, on(b, tensor.Int32), float32(1), 8}, tensor.ErrDType},
		{"nil tensor", cfg, []any{y, (*tensor.Tensor)(nil), float32(1), 8}, tensor.ErrParam},
		{"float64", cfg, []any{y, x, 1.0, 8}, tensor.ErrParam},
		{"int64", cfg, []any{y, x, float32(1), int64(8)}, tensor.ErrParam},
		{"count", cfg, []any{y, x, float32(1)}, tensor.ErrParam},
		{"block", cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 2048}}, []any{y, x, float32(1), 8}, tensor.ErrParam},
		{"grid", cuda.LaunchConfig{Grid: cuda.Dim3{X: -1}, Block: cuda.Dim3{X: 32}}, []any{y, x, float32(1), 8}, tensor.ErrParam},
		{"shared", cuda.LaunchConfig{Block: cuda.Dim3{X: 32}, SharedBytes: 1 << 20}, []any{y, x, float32(1), 8}, tensor.ErrParam},
	} {
		if err := k.Launch(c.cfg, c.args...); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: Launch = %v, want %v", c.name, err, c.want)
		}
	}
	if err := x.Release(); err != nil {
		t.Fatal(err)
	}
	if err := k.Launch(cfg, y, x, float32(1), 8); !errors.Is(err, tensor.ErrClosed) {
		t.Errorf("released tensor: %v, want ErrClosed", err)
	}
}
