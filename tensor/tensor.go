package tensor

import (
	"fmt"
	"unsafe"
)

// Tensor is a dense, row-major array with a dtype, living in storage owned by a Backend.
// A Tensor value is a view: Rows and Reshape share storage with the tensor they come from.
// Tensors are not safe for concurrent writes; concurrent reads are fine.
type Tensor struct {
	shape  Shape
	dtype  DType
	store  Storage
	offset int // in elements
	n      int
}

// New allocates a zero-filled tensor on backend b.
func New(b Backend, dtype DType, shape ...int) (*Tensor, error) {
	const op = "tensor.New"
	if b == nil {
		return nil, Errorf(ErrBackend, op, "backend", "is nil")
	}
	if !dtype.Valid() {
		return nil, Errorf(ErrDType, op, "dtype", "unknown dtype %v", dtype)
	}
	n, err := checkShape(op, shape)
	if err != nil {
		return nil, err
	}
	st, err := b.Alloc(n * dtype.Size())
	if err != nil {
		return nil, err
	}
	return &Tensor{shape: cloneShape(shape), dtype: dtype, store: st, n: n}, nil
}

// NewLike allocates a zero-filled tensor with t's backend and shape and the given dtype.
func NewLike(t *Tensor, dtype DType) (*Tensor, error) { return New(t.Backend(), dtype, t.shape...) }

// Must returns t and panics if err is not nil. It is meant for examples and tests with literal
// inputs; library code never uses it.
func Must(t *Tensor, err error) *Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

func cloneShape(s []int) Shape { return append(Shape{}, s...) }

// wrapHost wraps host bytes without copying.
func wrapHost(op string, dtype DType, raw []byte, n int, shape []int) (*Tensor, error) {
	want, err := checkShape(op, shape)
	if err != nil {
		return nil, err
	}
	if want != n {
		return nil, Errorf(ErrShape, op, "shape", "%v needs %d elements, data has %d", shape, want, n)
	}
	return &Tensor{shape: cloneShape(shape), dtype: dtype, store: hostStorage(raw), n: n}, nil
}

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func fromBytes[T any](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) < sz {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/sz)
}

// FromFloat32 wraps data as a CPU tensor without copying: writes through either are visible in
// both. With no shape the tensor is one-dimensional.
func FromFloat32(data []float32, shape ...int) (*Tensor, error) {
	return wrapHost("tensor.FromFloat32", Float32, asBytes(data), len(data), defaultShape(shape, len(data)))
}

// FromBF16 wraps bfloat16 data as a CPU tensor without copying.
func FromBF16(data []BF16, shape ...int) (*Tensor, error) {
	return wrapHost("tensor.FromBF16", BFloat16, asBytes(data), len(data), defaultShape(shape, len(data)))
}

// FromInt32 wraps data as a CPU tensor without copying.
func FromInt32(data []int32, shape ...int) (*Tensor, error) {
	return wrapHost("tensor.FromInt32", Int32, asBytes(data), len(data), defaultShape(shape, len(data)))
}

// FromUint8 wraps data as a CPU tensor without copying.
func FromUint8(data []uint8, shape ...int) (*Tensor, error) {
	return wrapHost("tensor.FromUint8", Uint8, data, len(data), defaultShape(shape, len(data)))
}

// Scalar returns a CPU float32 tensor of shape [] holding v.
func Scalar(v float32) *Tensor {
	t, _ := FromFloat32([]float32{v})
	t.shape = Shape{}
	return t
}

func defaultShape(shape []int, n int) []int {
	if shape == nil {
		return []int{n}
	}
	return shape
}

// Shape returns the dimensions. The caller must not modify the returned slice.
func (t *Tensor) Shape() Shape { return t.shape }

// Dim returns dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Len returns the number of elements.
func (t *Tensor) Len() int { return t.n }

// Backend returns the backend that owns the tensor's storage.
func (t *Tensor) Backend() Backend { return t.store.Backend() }

// Storage returns the underlying storage and the tensor's element offset into it. Backends use
// this to find device pointers; other code rarely needs it.
func (t *Tensor) Storage() (Storage, int) { return t.store, t.offset }

// String describes the tensor without its data, e.g. "Tensor[float32 [2 3] cpu]".
func (t *Tensor) String() string {
	if t == nil {
		return "Tensor(nil)"
	}
	return fmt.Sprintf("Tensor[%v %v %s]", t.dtype, t.shape, t.Backend().Name())
}

// Release frees the tensor's storage now (device memory); host tensors are left to the GC.
// Views share storage: release only when no view is in use.
func (t *Tensor) Release() error { return t.store.Release() }

// Rows returns the view of rows [lo, hi) along the first dimension, sharing storage.
func (t *Tensor) Rows(lo, hi int) (*Tensor, error) {
	const op = "Tensor.Rows"
	if len(t.shape) == 0 {
		return nil, Errorf(ErrShape, op, "t", "a scalar has no rows")
	}
	if lo < 0 || hi < lo || hi > t.shape[0] {
		return nil, Errorf(ErrShape, op, "lo, hi", "[%d, %d) is outside [0, %d)", lo, hi, t.shape[0])
	}
	inner := 1
	for _, d := range t.shape[1:] {
		inner *= d
	}
	s := cloneShape(t.shape)
	s[0] = hi - lo
	return &Tensor{shape: s, dtype: t.dtype, store: t.store, offset: t.offset + lo*inner, n: (hi - lo) * inner}, nil
}

// Reshape returns a view with a new shape of the same element count. One dimension may be -1.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	const op = "Tensor.Reshape"
	s := cloneShape(shape)
	infer, known := -1, 1
	for i, d := range s {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			return nil, Errorf(ErrShape, op, "shape", "invalid dimension %d in %v", d, shape)
		default:
			known *= d
		}
	}
	if infer >= 0 {
		if known == 0 || t.n%known != 0 {
			return nil, Errorf(ErrShape, op, "shape", "cannot infer -1 in %v from %d elements", shape, t.n)
		}
		s[infer] = t.n / known
	}
	if s.NumElements() != t.n {
		return nil, Errorf(ErrShape, op, "shape", "%v has %d elements, tensor has %d", shape, s.NumElements(), t.n)
	}
	return &Tensor{shape: s, dtype: t.dtype, store: t.store, offset: t.offset, n: t.n}, nil
}

// hostBytes returns the tensor's bytes when its storage is in host memory.
func (t *Tensor) hostBytes(op string) ([]byte, error) {
	hs, ok := t.store.(HostStorage)
	if !ok {
		return nil, Errorf(ErrBackend, op, "t", "tensor lives on %s, not in host memory (copy it with tensor.To(tensor.CPU(), t))", t.Backend().Name())
	}
	sz := t.dtype.Size()
	return hs.Bytes()[t.offset*sz : (t.offset+t.n)*sz], nil
}

func typedHost[T any](t *Tensor, op string, want DType) ([]T, error) {
	if t == nil {
		return nil, Errorf(ErrShape, op, "t", "is nil")
	}
	if t.dtype != want {
		return nil, Errorf(ErrDType, op, "t", "is %v, want %v", t.dtype, want)
	}
	b, err := t.hostBytes(op)
	if err != nil {
		return nil, err
	}
	return fromBytes[T](b), nil
}

// Float32s returns the elements of a host-resident float32 tensor without copying.
func (t *Tensor) Float32s() ([]float32, error) {
	return typedHost[float32](t, "Tensor.Float32s", Float32)
}

// BF16s returns the elements of a host-resident bfloat16 tensor without copying.
func (t *Tensor) BF16s() ([]BF16, error) { return typedHost[BF16](t, "Tensor.BF16s", BFloat16) }

// Int32s returns the elements of a host-resident int32 tensor without copying.
func (t *Tensor) Int32s() ([]int32, error) { return typedHost[int32](t, "Tensor.Int32s", Int32) }

// Uint8s returns the elements of a host-resident uint8 tensor without copying.
func (t *Tensor) Uint8s() ([]uint8, error) { return typedHost[uint8](t, "Tensor.Uint8s", Uint8) }

// To copies t to backend b (a new tensor even when b is t's own backend).
func To(b Backend, t *Tensor) (*Tensor, error) {
	out, err := New(b, t.dtype, t.shape...)
	if err != nil {
		return nil, err
	}
	if err := CopyInto(out, t); err != nil {
		out.Release()
		return nil, err
	}
	return out, nil
}

// CopyInto copies src into dst. Shapes and dtypes must match; the backends may differ.
func CopyInto(dst, src *Tensor) error {
	const op = "tensor.CopyInto"
	if err := CheckSameShape(op, "dst", dst, "src", src); err != nil {
		return err
	}
	if dst.dtype != src.dtype {
		return Errorf(ErrDType, op, "src", "is %v, dst is %v", src.dtype, dst.dtype)
	}
	sz := src.dtype.Size()
	db, sb := dst.Backend(), src.Backend()
	switch {
	case db == sb:
		return db.Copy(dst.store, dst.offset*sz, src.store, src.offset*sz, src.n*sz)
	case isHost(src):
		b, _ := src.hostBytes(op)
		return db.Upload(dst.store, dst.offset*sz, b)
	case isHost(dst):
		b, _ := dst.hostBytes(op)
		return sb.Download(b, src.store, src.offset*sz)
	default: // device to device across backends: stage through host memory
		tmp := make([]byte, src.n*sz)
		if err := sb.Download(tmp, src.store, src.offset*sz); err != nil {
			return err
		}
		return db.Upload(dst.store, dst.offset*sz, tmp)
	}
}

func isHost(t *Tensor) bool { _, ok := t.store.(HostStorage); return ok }

// IsHost reports whether the tensor's storage is in host memory (so Float32s and friends work).
func (t *Tensor) IsHost() bool { return isHost(t) }
