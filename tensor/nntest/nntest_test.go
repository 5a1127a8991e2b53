package nntest_test

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// TestCPU certifies the CPU backend: the vector GEMM where the CPU has one, the pure-Go kernels
// otherwise (and everywhere under -tags noasm).
func TestCPU(t *testing.T) { nntest.Run(t, tensor.CPU()) }

// TestHostFallback certifies every family's host fallback: remote is memory package tensor
// cannot read, with no kernels, so each op copies its tensors to the host, runs the pure-Go
// kernel and copies its outputs back (accumulated outputs included).
func TestHostFallback(t *testing.T) { nntest.Run(t, remote{}) }

type remote struct{}

type remoteMem []byte

func (m remoteMem) Backend() tensor.Backend { return remote{} }
func (m remoteMem) Len() int                { return len(m) }
func (m remoteMem) Release() error          { return nil }

// window returns bytes [off, off+n) of a storage of this backend.
func window(s tensor.Storage, off, n int) ([]byte, error) {
	m, ok := s.(remoteMem)
	if !ok || off < 0 || n < 0 || off+n > len(m) {
		return nil, fmt.Errorf("remote: bad access [%d, %d+%d) to %T", off, off, n, s)
	}
	return m[off : off+n], nil
}

func (remote) Name() string                        { return "remote" }
func (remote) Alloc(n int) (tensor.Storage, error) { return make(remoteMem, n), nil }
func (remote) Sync() error                         { return nil }
func (remote) Close() error                        { return nil }

func (remote) Upload(dst tensor.Storage, off int, src []byte) error {
	w, err := window(dst, off, len(src))
	copy(w, src)
	return err
}

func (r remote) Download(dst []byte, src tensor.Storage, off int) error {
	w, err := window(src, off, len(dst))
	copy(dst, w)
	return err
}

func (r remote) Copy(dst tensor.Storage, dstOff int, src tensor.Storage, srcOff, n int) error {
	s, err := window(src, srcOff, n)
	if err != nil {
		return err
	}
	return r.Upload(dst, dstOff, s)
}
