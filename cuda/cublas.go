//go:build cuda

package cuda

// The cuBLAS entry points mtrl needs and gorgonia.org/cu/blas v0.9.6 lacks (GemmEx with bfloat16
// inputs and float32 compute, its strided-batched form, the stream setting), bound here.
//
// They are declared below rather than included from cublas_v2.h, and weak, so that this file
// compiles and links the same way against the real library and against the emulator's
// stand-in (internal/cuemu/blas), where no CUDA header exists. The definitions come from the
// package gorgonia.org/cu/blas, imported for that alone: the real one links libcublas (its cgo
// LDFLAGS), the emulator's defines them. A build where neither is linked gets an error, never
// a call through a null pointer.

/*
typedef void* mtrl_cublas;
extern int cublasCreate_v2(mtrl_cublas*) __attribute__((weak));
extern int cublasDestroy_v2(mtrl_cublas) __attribute__((weak));
extern int cublasSetStream_v2(mtrl_cublas, void*) __attribute__((weak));
extern int cublasGemmEx(mtrl_cublas, int, int, int, int, int, const void*, const void*, int, int,
	const void*, int, int, const void*, void*, int, int, int, int) __attribute__((weak));
extern int cublasGemmStridedBatchedEx(mtrl_cublas, int, int, int, int, int, const void*, const void*,
	int, int, long long, const void*, int, int, long long, const void*, void*, int, int, long long,
	int, int, int) __attribute__((weak));

static int mtrl_cublas_linked(void) {
	return cublasCreate_v2 && cublasDestroy_v2 && cublasSetStream_v2 && cublasGemmEx && cublasGemmStridedBatchedEx;
}

// mtrl_gemm is one cublasGemmEx (batch 1) or cublasGemmStridedBatchedEx call with float32
// output and compute; device addresses come in as integers (they are not Go pointers).
static int mtrl_gemm(mtrl_cublas h, int opa, int opb, int m, int n, int k, float alpha,
	unsigned long long a, int atype, int lda, long long sa, unsigned long long b, int btype, int ldb,
	long long sb, float beta, unsigned long long c, int ldc, long long sc, int batch) {
	if (batch == 1) {
		return cublasGemmEx(h, opa, opb, m, n, k, &alpha, (const void*)a, atype, lda, (const void*)b, btype,
			ldb, &beta, (void*)c, 0, ldc, 68, -1);
	}
	return cublasGemmStridedBatchedEx(h, opa, opb, m, n, k, &alpha, (const void*)a, atype, lda, sa,
		(const void*)b, btype, ldb, sb, &beta, (void*)c, 0, ldc, sc, batch, 68, -1);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"gorgonia.org/cu"
	_ "gorgonia.org/cu/blas" // links libcublas (or, under scripts/cuda-emu, the stand-in)
)

// cuBLAS constants (cublas_api.h and library_types.h of CUDA 11.8); mtrl_gemm passes
// CUBLAS_COMPUTE_32F (68: float32 products and sums, no TF32) and CUBLAS_GEMM_DEFAULT (-1).
const (
	cublasOpN          = 0
	cublasOpT          = 1
	cudaR32F           = 0
	cudaR16BF          = 14
	cublasMaxBatch     = 65535 // the batches of one strided call (larger counts are split)
	cublasInt32Maximum = 1<<31 - 1
)

// cublasError is a cuBLAS status other than CUBLAS_STATUS_SUCCESS.
type cublasError int

var cublasStatusNames = map[cublasError]string{1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE",
	8: "ARCH_MISMATCH", 11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED",
	16: "LICENSE_ERROR"}

func (e cublasError) Error() string {
	if s, ok := cublasStatusNames[e]; ok {
		return "CUBLAS_STATUS_" + s
	}
	return fmt.Sprintf("cuBLAS status %d", int(e))
}

func cublasStatus(s C.int) error {
	if s == 0 {
		return nil
	}
	return cublasError(s)
}

// blasHandle returns the backend's cuBLAS handle, created at the first GEMM and bound to the
// backend's stream (so GEMMs are ordered with the kernels). It runs on the backend's thread.
func (b *Backend) blasHandle(op string) (C.mtrl_cublas, error) {
	if b.blas != nil {
		return C.mtrl_cublas(b.blas), nil
	}
	if C.mtrl_cublas_linked() == 0 {
		return nil, tensor.Errorf(tensor.ErrDevice, op, "", "cuBLAS is not linked into this binary")
	}
	var h C.mtrl_cublas
	if err := cublasStatus(C.cublasCreate_v2(&h)); err != nil {
		return nil, devErr(op, "cublasCreate", "", err)
	}
	if err := cublasStatus(C.cublasSetStream_v2(h, unsafe.Pointer(b.stream.C()))); err != nil {
		_ = C.cublasDestroy_v2(h)
		return nil, devErr(op, "cublasSetStream", "", err)
	}
	b.blas = unsafe.Pointer(h)
	return h, nil
}

// destroyBLAS releases the cuBLAS handle before the context goes.
func (b *Backend) destroyBLAS() {
	if b.blas != nil {
		_ = C.cublasDestroy_v2(C.mtrl_cublas(b.blas))
		b.blas = nil
	}
}

// gemmOperand is one matrix of a row-major product: its device address and dtype, whether it
// is used transposed, and its batch stride in elements (0: shared by every batch).
type gemmOperand struct {
	p      cu.DevicePtr
	dtype  tensor.DType
	trans  bool
	stride int64
}

func (o gemmOperand) cudaType() C.int {
	if o.dtype == tensor.BFloat16 {
		return cudaR16BF
	}
	return cudaR32F
}

// gemm computes, for each of batch products, the row-major c [m, n] (float32, batch stride
// m·n) = op(a) [m, k] · op(b) [k, n] (+ c when acc) through cuBLAS, with float32 products and
// sums. a and b must have one dtype. cuBLAS is column-major: a row-major matrix is its
// transpose, so the call computes cᵀ = op(b)ᵀ·op(a)ᵀ, b first.
func (b *Backend) gemm(op string, batch, m, n, k int, a, bm gemmOperand, c cu.DevicePtr, acc bool) error {
	if m == 0 || n == 0 || batch == 0 {
		return nil
	}
	for _, d := range []int{m, n, k} {
		if d > cublasInt32Maximum {
			return tensor.Errorf(tensor.ErrParam, op, "", "a dimension of %d exceeds cuBLAS's int range", d)
		}
	}
	h, err := b.blasHandle(op)
	if err != nil {
		return err
	}
	beta := float32(0)
	if acc {
		beta = 1
	}
	opA, lda := C.int(cublasOpN), C.int(max(1, k))
	if a.trans {
		opA, lda = cublasOpT, C.int(max(1, m))
	}
	opB, ldb := C.int(cublasOpN), C.int(max(1, n))
	if bm.trans {
		opB, ldb = cublasOpT, C.int(max(1, k))
	}
	call := "cublasGemmEx"
	if batch > 1 {
		call = "cublasGemmStridedBatchedEx"
	}
	sc := int64(m) * int64(n)
	for z := 0; z < batch; z += cublasMaxBatch {
		nz := min(batch-z, cublasMaxBatch)
		pa := a.p + cu.DevicePtr(int64(z)*a.stride*int64(a.dtype.Size()))
		pb := bm.p + cu.DevicePtr(int64(z)*bm.stride*int64(bm.dtype.Size()))
		pc := c + cu.DevicePtr(int64(z)*sc*4)
		s := C.mtrl_gemm(h, opB, opA, C.int(n), C.int(m), C.int(k), 1,
			C.ulonglong(pb), bm.cudaType(), ldb, C.longlong(bm.stride),
			C.ulonglong(pa), a.cudaType(), lda, C.longlong(a.stride),
			C.float(beta), C.ulonglong(pc), C.int(n), C.longlong(sc), C.int(nz))
		if err := cublasStatus(s); err != nil {
			return devErr(op, call, "", err)
		}
	}
	return nil
}
