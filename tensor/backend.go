package tensor

// Backend owns device memory. The interface is the small core every backend implements in full:
// allocation, copies in and out, and synchronisation. Compute is not part of the core: each op
// family declares an optional interface (for example LogProbEntropyKernel) that a backend may
// implement for speed. When it does not, the validated entry point stages the tensors through host
// memory (see OnHost) and runs the pure-Go kernel, so a new backend is correct from its first day
// and can be made fast one op family at a time.
type Backend interface {
	// Name identifies the backend and device, e.g. "cpu" or "cuda:0".
	Name() string
	// Alloc returns zero-filled storage of the given size in bytes.
	Alloc(bytes int) (Storage, error)
	// Upload copies src into dst starting at byte offset off.
	Upload(dst Storage, off int, src []byte) error
	// Download copies len(dst) bytes of src starting at byte offset off into dst.
	Download(dst []byte, src Storage, off int) error
	// Copy copies n bytes between two storages of this backend.
	Copy(dst Storage, dstOff int, src Storage, srcOff, n int) error
	// Sync waits until all work queued on the backend has finished.
	Sync() error
	// Close releases the backend's resources. Tensors allocated on it become unusable.
	Close() error
}

// KernelSet is implemented by a backend that keeps its fused kernels off its own method set: its
// Kernels method returns the value that implements the op families' kernel interfaces. Kernel
// methods take tensors that the entry points (tensor.LogProbEntropy, ppo.PolicyLoss, …) have
// validated; keeping them off the backend type means a user of the backend does not meet
// unvalidated methods named like the entry points. Package cuda does this.
type KernelSet interface {
	Kernels() any
}

// KernelOf returns backend b's implementation of kernel interface K: b itself when it
// implements K, else the value of its Kernels method (KernelSet) when that does. Entry points use
// it to find a backend's kernel for their op family.
func KernelOf[K any](b Backend) (K, bool) {
	if k, ok := b.(K); ok {
		return k, true
	}
	if s, ok := b.(KernelSet); ok {
		k, ok := s.Kernels().(K)
		return k, ok
	}
	var none K
	return none, false
}

// Storage is a backend-owned buffer.
type Storage interface {
	Backend() Backend
	// Len is the size in bytes.
	Len() int
	// Release frees the memory now instead of waiting for the garbage collector. Using the
	// storage afterwards is an error. Releasing host storage is a no-op.
	Release() error
}

// HostStorage is storage that lives in host memory, so its bytes can be used without a copy.
type HostStorage interface {
	Storage
	Bytes() []byte
}
