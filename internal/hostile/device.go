package hostile

import (
	"sync"
	"sync/atomic"

	"github.com/mtrl-go/mtrl/tensor"
)

// Device returns a second backend whose storage is not host memory: ops without its kernels
// stage through tensor.OnHost, and tensors on it are "foreign" to CPU tensors. It is a plain
// Go byte store (no device), safe for concurrent use.
func Device() tensor.Backend { return dev }

var dev = &device{}

type device struct{}

type devStorage struct {
	mu       sync.RWMutex
	buf      []byte
	released atomic.Bool
}

func (*devStorage) Backend() tensor.Backend { return dev }

func (s *devStorage) Len() int { return len(s.buf) }

func (s *devStorage) Release() error {
	s.released.Store(true)
	return nil
}

func (*device) Name() string { return "hostile-device" }

func (*device) Alloc(bytes int) (tensor.Storage, error) {
	if bytes < 0 || bytes > 1<<30 {
		return nil, tensor.Errorf(tensor.ErrDevice, "hostile.Alloc", "bytes", "%d is outside [0, 1 GiB]", bytes)
	}
	return &devStorage{buf: make([]byte, bytes)}, nil
}

// span checks that [off, off+n) lies in storage st and returns it.
func span(op string, st tensor.Storage, off, n int) (*devStorage, error) {
	s, ok := st.(*devStorage)
	if !ok || s == nil {
		return nil, tensor.Errorf(tensor.ErrBackend, op, "storage", "is not hostile-device storage")
	}
	if s.released.Load() {
		return nil, tensor.Errorf(tensor.ErrClosed, op, "storage", "was released")
	}
	return s, tensor.CheckRange(op, "off", len(s.buf), off, n)
}

func (*device) Upload(dst tensor.Storage, off int, src []byte) error {
	s, err := span("hostile.Upload", dst, off, len(src))
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(s.buf[off:], src)
	return nil
}

func (*device) Download(dst []byte, src tensor.Storage, off int) error {
	s, err := span("hostile.Download", src, off, len(dst))
	if err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	copy(dst, s.buf[off:])
	return nil
}

func (*device) Copy(dst tensor.Storage, dstOff int, src tensor.Storage, srcOff, n int) error {
	d, err := span("hostile.Copy", dst, dstOff, n)
	if err != nil {
		return err
	}
	s, err := span("hostile.Copy", src, srcOff, n)
	if err != nil {
		return err
	}
	tmp := make([]byte, n)
	s.mu.RLock()
	copy(tmp, s.buf[srcOff:])
	s.mu.RUnlock()
	d.mu.Lock()
	copy(d.buf[dstOff:], tmp)
	d.mu.Unlock()
	return nil
}

func (*device) Sync() error  { return nil }
func (*device) Close() error { return nil }
