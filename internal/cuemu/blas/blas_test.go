package cublas

import (
	"runtime"
	"testing"
	"unsafe"

	cu "gorgonia.org/cu"
)

// TestReverseK: CUEMU_BLAS=reverse sums over k the other way. The planted bug: a result that
// holds only in one order, 1 + 1e8 − 1e8 in float32 (0 ascending, 1 descending), as a
// comparison of two GEMM paths to the bit would hold only while both sum in one order.
func TestReverseK(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.MakeContext(cu.SchedBlockingSync)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctx.Destroy() }()
	var h unsafe.Pointer
	if s := cublasCreate_v2(&h); s != statusSuccess {
		t.Fatalf("cublasCreate_v2: %d", s)
	}
	defer cublasDestroy_v2(h)
	put := func(v []float32) unsafe.Pointer {
		p, err := cu.MemAlloc(int64(4 * len(v)))
		if err != nil {
			t.Fatal(err)
		}
		b := cu.DeviceBytes("test", p, int64(4*len(v)))
		copy(unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(v)), v)
		return unsafe.Pointer(&b[0])
	}
	a, b, c := put([]float32{1, 1e8, -1e8}), put([]float32{1, 1, 1}), put([]float32{0})
	defer func() { reverseK = false }()
	for _, tc := range []struct {
		reverse bool
		want    float32
	}{{false, 0}, {true, 1}} {
		reverseK = tc.reverse
		alpha, beta := float32(1), float32(0)
		// C (1×1) = A (1×3) · B (3×1), column-major
		if s := cublasGemmEx(h, opN, opN, 1, 1, 3, unsafe.Pointer(&alpha), a, typeF32, 1, b, typeF32, 3,
			unsafe.Pointer(&beta), c, typeF32, 1, compute32F, algoDefault); s != statusSuccess {
			t.Fatalf("cublasGemmEx: %d", s)
		}
		if got := *(*float32)(c); got != tc.want {
			t.Errorf("reverse %v: 1 + 1e8 − 1e8 = %v, want %v", tc.reverse, got, tc.want)
		}
	}
}
