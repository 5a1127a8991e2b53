package nntest_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
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

// remoteDownloads counts Download calls (TestHostIndexArrays).
var remoteDownloads atomic.Int64

func (r remote) Download(dst []byte, src tensor.Storage, off int) error {
	remoteDownloads.Add(1)
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

// TestHostIndexArrays checks that cu_seqlens and Lens may be host tensors while the rest are
// on another backend: the same results as with all of them there, and two fewer downloads
// (the index arrays are neither read back to validate them nor staged for the kernel).
func TestHostIndexArrays(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	put := func(t0 *tensor.Tensor, err error) *tensor.Tensor {
		t.Helper()
		d, err2 := tensor.To(remote{}, tensor.Must(t0, err))
		if err2 != nil {
			t.Fatal(err2)
		}
		return d
	}
	const tq, tk, hq, hkv, d = 5, 9, 4, 2, 8
	q := put(tensor.FromFloat32(randn(tq*hq*d), tq, hq, d))
	k := put(tensor.FromFloat32(randn(tk*hkv*d), tk, hkv, d))
	v := put(tensor.FromFloat32(randn(tk*hkv*d), tk, hkv, d))
	cq, ck := []int32{0, 1, 5}, []int32{0, 4, 9}
	cfg := tensor.DefaultAttentionConfig(d, true)
	run := func(cuQ, cuK *tensor.Tensor) ([]float32, int64) {
		out := put(tensor.New(tensor.CPU(), tensor.Float32, tq, hq, d))
		n0 := remoteDownloads.Load()
		if err := tensor.Attention(out, tensor.AttentionInputs{Q: q, K: k, V: v, CuSeqlensQ: cuQ, CuSeqlensK: cuK}, cfg); err != nil {
			t.Fatal(err)
		}
		n := remoteDownloads.Load() - n0
		h, err := tensor.To(tensor.CPU(), out)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := h.Float32s()
		return f, n
	}
	want, nDev := run(put(tensor.FromInt32(cq, 3)), put(tensor.FromInt32(ck, 3)))
	got, nHost := run(tensor.Must(tensor.FromInt32(cq, 3)), tensor.Must(tensor.FromInt32(ck, 3)))
	if !slices.Equal(got, want) {
		t.Fatalf("host cu_seqlens: out = %v, want %v", got, want)
	}
	if nHost != nDev-2 {
		t.Errorf("host cu_seqlens: %d downloads, with them on the backend %d: want 2 fewer", nHost, nDev)
	}

	const b, s = 2, 6
	kc := put(tensor.FromFloat32(randn(b*s*hkv*d), b, s, hkv, d))
	vc := put(tensor.FromFloat32(randn(b*s*hkv*d), b, s, hkv, d))
	qd := put(tensor.FromFloat32(randn(b*hq*d), b, 1, hq, d))
	lens := []int32{3, 6}
	decode := func(l *tensor.Tensor) []float32 {
		out := put(tensor.New(tensor.CPU(), tensor.Float32, b, 1, hq, d))
		if err := tensor.AttentionDecode(out, tensor.DecodeInputs{Q: qd, KCache: kc, VCache: vc, Lens: l}, cfg); err != nil {
			t.Fatal(err)
		}
		h, err := tensor.To(tensor.CPU(), out)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := h.Float32s()
		return f
	}
	if got, want := decode(tensor.Must(tensor.FromInt32(lens, b))), decode(put(tensor.FromInt32(lens, b))); !slices.Equal(got, want) {
		t.Fatalf("host Lens: out = %v, want %v", got, want)
	}
}
