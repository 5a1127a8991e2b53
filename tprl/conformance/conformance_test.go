package conformance_test

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/backendtest"
	"github.com/mtrl-go/mtrl/tprl/conformance"
)

// staging is the smallest backend: memory that package tensor cannot read directly and no
// kernels, so every op stages its tensors through host memory and runs the pure-Go kernel. It
// must pass every suite bit for bit, which also runs the suites themselves on every `go test`.
type staging struct{}

type stagingStorage struct {
	b     []byte
	freed bool
}

var errFreed = errors.New("staging: storage was released")

func (s *stagingStorage) Backend() tensor.Backend { return staging{} }
func (s *stagingStorage) Len() int                { return len(s.b) }
func (s *stagingStorage) Release() error          { s.freed = true; return nil }

func (staging) Name() string { return "staging" }
func (staging) Alloc(n int) (tensor.Storage, error) {
	return &stagingStorage{b: make([]byte, n)}, nil
}

func bytesOf(st tensor.Storage, off, n int) ([]byte, error) {
	s, ok := st.(*stagingStorage)
	switch {
	case !ok:
		return nil, errors.New("staging: foreign storage")
	case s.freed:
		return nil, errFreed
	case off < 0 || n < 0 || off+n > len(s.b):
		return nil, errors.New("staging: range outside the storage")
	}
	return s.b[off : off+n], nil
}

func (staging) Upload(dst tensor.Storage, off int, src []byte) error {
	d, err := bytesOf(dst, off, len(src))
	if err == nil {
		copy(d, src)
	}
	return err
}

func (staging) Download(dst []byte, src tensor.Storage, off int) error {
	s, err := bytesOf(src, off, len(dst))
	if err == nil {
		copy(dst, s)
	}
	return err
}

func (staging) Copy(dst tensor.Storage, dstOff int, src tensor.Storage, srcOff, n int) error {
	d, err := bytesOf(dst, dstOff, n)
	if err != nil {
		return err
	}
	s, err := bytesOf(src, srcOff, n)
	if err == nil {
		copy(d, s)
	}
	return err
}

func (staging) Sync() error  { return nil }
func (staging) Close() error { return nil }

func TestStagingBackend(t *testing.T) {
	conformance.Run(t, staging{}, backendtest.Config{
		Bitwise:     true,
		Shapes:      [][2]int{{3, 33}, {64, 257}},
		LogitShapes: [][2]int{{2, 5003}, {9, 1000}},
	})
}
