//go:build cuda

package cuda_test

import (
	_ "embed"
	"fmt"
	"log"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor"
)

// The PTX of testdata/axpy.cu (nvcc -ptx -arch=compute_80), committed and embedded as a user's
// package would embed its own.
//
//go:embed testdata/axpy.ptx
var axpyPTX string

// Bring your own kernels: load a PTX module on the backend, declare a kernel's parameters
// (checked against the PTX) and launch it on the backend's stream with tensors' device memory.
func Example_ownKernels() {
	b, err := cuda.New(0)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	mod, err := b.LoadModule("axpy", axpyPTX)
	if err != nil {
		log.Fatal(err)
	}
	// extern "C" __global__ void byok_axpy_f32(float* y, const float* x, float a, int64_t n)
	axpy, err := mod.Kernel("byok_axpy_f32",
		cuda.TensorParam(tensor.Float32), cuda.TensorParam(tensor.Float32), cuda.Float32Param, cuda.IntParam)
	if err != nil {
		log.Fatal(err)
	}
	x, _ := tensor.To(b, tensor.Must(tensor.FromFloat32([]float32{1, 2, 3, 4}, 4)))
	y, _ := tensor.To(b, tensor.Must(tensor.FromFloat32([]float32{10, 20, 30, 40}, 4)))
	if err := axpy.Launch(cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 128}}, y, x, float32(2), y.Len()); err != nil {
		log.Fatal(err)
	}
	host, _ := tensor.To(tensor.CPU(), y) // waits for the kernel
	fmt.Println(host.Float32s())
	// Output: [12 24 36 48] <nil>
}
