//go:build !cuda

package cuda

import "github.com/mtrl-go/mtrl/tensor"

// Backend is a CUDA device. In this build (without the `cuda` tag) it cannot be created: New
// returns ErrNotCompiled, and every method of a zero Backend returns ErrNotCompiled.
type Backend struct{}

var _ tensor.Backend = (*Backend)(nil)

// New would open CUDA device n; built without the `cuda` tag it returns ErrNotCompiled.
func New(device int) (*Backend, error) { return nil, ErrNotCompiled }

// Name returns "cuda (not compiled)".
func (*Backend) Name() string { return "cuda (not compiled)" }

// Alloc returns ErrNotCompiled.
func (*Backend) Alloc(int) (tensor.Storage, error) { return nil, ErrNotCompiled }

// Upload returns ErrNotCompiled.
func (*Backend) Upload(tensor.Storage, int, []byte) error { return ErrNotCompiled }

// Download returns ErrNotCompiled.
func (*Backend) Download([]byte, tensor.Storage, int) error { return ErrNotCompiled }

// Copy returns ErrNotCompiled.
func (*Backend) Copy(tensor.Storage, int, tensor.Storage, int, int) error { return ErrNotCompiled }

// Sync returns ErrNotCompiled.
func (*Backend) Sync() error { return ErrNotCompiled }

// Close returns nil.
func (*Backend) Close() error { return nil }

// Allocated returns 0, 0.
func (*Backend) Allocated() (bytes int64, storages int) { return 0, 0 }

// Peak returns 0.
func (*Backend) Peak() int64 { return 0 }

// ResetPeak does nothing.
func (*Backend) ResetPeak() {}

// Module is a PTX module loaded on a backend; in this build none can be loaded.
type Module struct{}

// Kernel is one kernel of a Module; in this build none exists.
type Kernel struct{}

// LoadModule returns ErrNotCompiled.
func (*Backend) LoadModule(name, ptx string) (*Module, error) { return nil, ErrNotCompiled }

// Name returns "".
func (*Module) Name() string { return "" }

// Has reports false.
func (*Module) Has(name string) bool { return false }

// Kernel returns ErrNotCompiled.
func (*Module) Kernel(name string, params ...Param) (*Kernel, error) { return nil, ErrNotCompiled }

// Name returns "".
func (*Kernel) Name() string { return "" }

// Launch returns ErrNotCompiled.
func (*Kernel) Launch(cfg LaunchConfig, args ...any) error { return ErrNotCompiled }

// Traffic counts the copies between host and device memory of one direction (see the cuda
// build); in this build nothing is ever copied.
type Traffic struct {
	Copies  int64 // number of copies
	Bytes   int64 // bytes moved
	Largest int64 // bytes of the largest copy
}

// Traffic returns zeros.
func (*Backend) Traffic() (up, down Traffic) { return Traffic{}, Traffic{} }

// ResetTraffic does nothing.
func (*Backend) ResetTraffic() {}
