package cuda

// The PTX of the Example's own kernel (testdata/axpy.cu); the backend's kernels are generated
// in ./kernels.
//go:generate go run github.com/mtrl-go/mtrl/internal/kernelbuild/ptxgen testdata
