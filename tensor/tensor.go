package tensor

import (
	"fmt"
	"unsafe"
)

// Tensor is a dense, row-major array with a dtype, living in storage owned by a Backend.
// A Tensor value is a view: Rows and Reshape share storage with the tensor they come from.
// Tensors are not safe for concurrent writes; concurrent reads are fine.
//
// Tensors come from New, NewLike, To, the FromXxx wrappers and views of those. The zero
// Tensor (a Tensor{} literal) has no storage: every function taking tensors refuses it (and
// nil) with an ErrShape error (see CheckTensor), and its accessors return zero values.
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
	n, err := CheckSize(op, "shape", shape...)
	if err != nil {
		return nil, err
	}
	bytes, err := CheckSize(op, "shape", n, dtype.Size())
	if err != nil {
		return nil, Errorf(ErrShape, op, "shape", "%v of %v needs more bytes than an int can count", shape, dtype)
	}
	st, err := b.Alloc(bytes)
	if err != nil {
		return nil, err
	}
	return &Tensor{shape: cloneShape(shape), dtype: dtype, store: st, n: n}, nil
}

// NewLike allocates a zero-filled tensor with t's backend and shape and the given dtype.
func NewLike(t *Tensor, dtype DType) (*Tensor, error) {
	if err := CheckTensor("tensor.NewLike", "t", t); err != nil {
		return nil, err
	}
	return New(t.Backend(), dtype, t.shape...)
}

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
	want, err := CheckSize(op, "shape", shape...)
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

// The accessors below accept a nil or zero Tensor and return zero values for it (no shape,
// no backend), so describing a bad argument in an error message cannot panic.

// valid reports whether t is a tensor with storage (not nil, not the zero Tensor).
func (t *Tensor) valid() bool { return t != nil && t.store != nil }

// Shape returns the dimensions. The caller must not modify the returned slice.
func (t *Tensor) Shape() Shape {
	if t == nil {
		return nil
	}
	return t.shape
}

// Dim returns dimension i; negative i counts from the end. A dimension the tensor does not
// have (i outside [-Rank, Rank)) has size 0.
func (t *Tensor) Dim(i int) int {
	s := t.Shape()
	if i < 0 {
		i += len(s)
	}
	if i < 0 || i >= len(s) {
		return 0
	}
	return s[i]
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.Shape()) }

// DType returns the element type (0, not a valid DType, for a nil or zero Tensor).
func (t *Tensor) DType() DType {
	if t == nil {
		return 0
	}
	return t.dtype
}

// Len returns the number of elements.
func (t *Tensor) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Backend returns the backend that owns the tensor's storage (nil for a nil or zero Tensor).
func (t *Tensor) Backend() Backend {
	if !t.valid() {
		return nil
	}
	return t.store.Backend()
}

// Storage returns the underlying storage and the tensor's element offset into it. Backends use
// this to find device pointers; other code rarely needs it.
func (t *Tensor) Storage() (Storage, int) {
	if t == nil {
		return nil, 0
	}
	return t.store, t.offset
}

// String describes the tensor without its data, e.g. "Tensor[float32 [2 3] cpu]".
func (t *Tensor) String() string {
	switch {
	case t == nil:
		return "Tensor(nil)"
	case t.store == nil:
		return "Tensor(zero)"
	}
	return fmt.Sprintf("Tensor[%v %v %s]", t.dtype, t.shape, t.Backend().Name())
}

// Release frees the tensor's storage now (device memory); host tensors are left to the GC.
// Views share storage: release only when no view is in use. Releasing a nil or zero Tensor
// does nothing.
func (t *Tensor) Release() error {
	if !t.valid() {
		return nil
	}
	return t.store.Release()
}

// Rows returns the view of rows [lo, hi) along the first dimension, sharing storage.
func (t *Tensor) Rows(lo, hi int) (*Tensor, error) {
	const op = "Tensor.Rows"
	if err := CheckTensor(op, "t", t); err != nil {
		return nil, err
	}
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
	if err := CheckTensor(op, "t", t); err != nil {
		return nil, err
	}
	s := cloneShape(shape)
	infer := -1
	for i, d := range s {
		if d == -1 && infer < 0 {
			infer, s[i] = i, 1 // counted as 1 below, then inferred
		}
	}
	known, err := CheckSize(op, "shape", s...)
	if err != nil {
		return nil, Errorf(ErrShape, op, "shape", "%v has a negative dimension (other than one -1) or more elements than an int can count", shape)
	}
	if infer >= 0 {
		if known == 0 || t.n%known != 0 {
			return nil, Errorf(ErrShape, op, "shape", "cannot infer -1 in %v from %d elements", shape, t.n)
		}
		s[infer] = t.n / known
	}
	if n, err := CheckSize(op, "shape", s...); err != nil || n != t.n {
		return nil, Errorf(ErrShape, op, "shape", "%v does not have the tensor's %d elements", shape, t.n)
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
	b := hs.Bytes()
	if lo, hi := t.offset*sz, (t.offset+t.n)*sz; hi <= len(b) {
		return b[lo:hi], nil
	}
	return nil, Errorf(ErrDevice, op, "t", "storage of %d bytes is shorter than the tensor (a backend's Alloc returned less than asked)", len(b))
}

func typedHost[T any](t *Tensor, op string, want DType) ([]T, error) {
	if err := CheckTensor(op, "t", t); err != nil {
		return nil, err
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

// HostFloat32s returns a float32 or bfloat16 tensor's values as float32 on the host: a float32
// host tensor's own elements (no copy, as Float32s), otherwise a new slice (downloaded from a
// device, bfloat16 widened exactly).
func HostFloat32s(t *Tensor) ([]float32, error) {
	const op = "tensor.HostFloat32s"
	if err := CheckTensor(op, "t", t); err != nil {
		return nil, err
	}
	if t.dtype != Float32 && t.dtype != BFloat16 {
		return nil, Errorf(ErrDType, op, "t", "is %v, want float32 or bfloat16", t.dtype)
	}
	h := t
	if !t.IsHost() {
		var err error
		if h, err = To(CPU(), t); err != nil {
			return nil, err
		}
	}
	if h.dtype == Float32 {
		return h.Float32s()
	}
	b, err := h.BF16s()
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b))
	WidenBF16(out, b)
	return out, nil
}

// To copies t to backend b (a new tensor even when b is t's own backend).
func To(b Backend, t *Tensor) (*Tensor, error) {
	if err := CheckTensor("tensor.To", "t", t); err != nil {
		return nil, err
	}
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

func isHost(t *Tensor) bool {
	if t == nil {
		return false
	}
	_, ok := t.store.(HostStorage)
	return ok
}

// IsHost reports whether the tensor's storage is in host memory (so Float32s and friends work).
func (t *Tensor) IsHost() bool { return isHost(t) }
