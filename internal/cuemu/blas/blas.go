// Package cublas stands in for gorgonia.org/cu/blas under the emulator: besides nothing of
// that package's Go API, it defines the C entry points of cuBLAS that package cuda calls
// (cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, cublasGemmEx,
// cublasGemmStridedBatchedEx) and computes them on the host. Package cuda declares those entry
// points weak and imports gorgonia.org/cu/blas only to link them: the real package links
// libcublas, this one defines them.
//
// The GEMMs are column-major as cuBLAS's: C = alpha·op(A)·op(B) + beta·C with op(A) m×k,
// leading dimensions and batch strides in elements, A and B both CUDA_R_32F or both
// CUDA_R_16BF, C CUDA_R_32F, compute type CUBLAS_COMPUTE_32F (or its _PEDANTIC form), algorithm
// CUBLAS_GEMM_DEFAULT or CUBLAS_GEMM_DEFAULT_TENSOR_OP. Products are summed in float32 over k
// in ascending order (descending under CUEMU_BLAS=reverse); when beta is 0, C is not read (as
// cuBLAS, so NaN in C does not propagate). Arguments cuBLAS rejects return
// CUBLAS_STATUS_INVALID_VALUE; types it has but this stand-in does not compute return
// CUBLAS_STATUS_NOT_SUPPORTED. Every matrix must lie in one live allocation of the calling
// thread's context, the handle must come from cublasCreate_v2 on that context and its stream
// belong to it: otherwise the call panics, as the driver calls of the emulator do.
package cublas

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"math"
	"os"
	"sync"
	"unsafe"

	cu "gorgonia.org/cu"
)

// cuBLAS's constants (cublas_api.h, library_types.h of CUDA 11.8).
const (
	statusSuccess        = 0
	statusNotInitialized = 1
	statusInvalidValue   = 7
	statusNotSupported   = 15

	opN = 0
	opT = 1

	typeF32  = 0  // CUDA_R_32F
	typeBF16 = 14 // CUDA_R_16BF

	compute32F         = 68 // CUBLAS_COMPUTE_32F
	compute32FPedantic = 69

	algoDefault         = -1 // CUBLAS_GEMM_DEFAULT
	algoDefaultTensorOp = 99
)

// handle is the state behind one cublasHandle_t.
type handle struct {
	ctx    int
	stream unsafe.Pointer
}

var (
	mu      sync.Mutex
	handles = map[unsafe.Pointer]*handle{}
	// reverseK (CUEMU_BLAS=reverse) sums each product over k in descending order: another
	// order of the same float32 sums, as cuBLAS picks its own by the shapes, to see how much a
	// result depends on it.
	reverseK = os.Getenv("CUEMU_BLAS") == "reverse"
)

func init() {
	if v := os.Getenv("CUEMU_BLAS"); v != "" && v != "reverse" {
		fmt.Fprintf(os.Stderr, "cuemu: CUEMU_BLAS=%q: want reverse or nothing\n", v)
		os.Exit(2)
	}
}

func lookup(call string, h unsafe.Pointer) *handle {
	mu.Lock()
	defer mu.Unlock()
	s, ok := handles[h]
	if !ok {
		panic("cuemu: " + call + ": not a handle from cublasCreate_v2 (or destroyed)")
	}
	if ctx := cu.CurrentContext(call); ctx != s.ctx {
		panic("cuemu: " + call + ": handle created in another context than the current one")
	}
	return s
}

//export cublasCreate_v2
func cublasCreate_v2(out *unsafe.Pointer) C.int {
	ctx := cu.CurrentContext("cublasCreate_v2")
	h := C.malloc(1)
	mu.Lock()
	handles[h] = &handle{ctx: ctx}
	mu.Unlock()
	*out = h
	return statusSuccess
}

//export cublasDestroy_v2
func cublasDestroy_v2(h unsafe.Pointer) C.int {
	lookup("cublasDestroy_v2", h)
	mu.Lock()
	delete(handles, h)
	mu.Unlock()
	C.free(h)
	return statusSuccess
}

//export cublasSetStream_v2
func cublasSetStream_v2(h, stream unsafe.Pointer) C.int {
	s := lookup("cublasSetStream_v2", h)
	cu.CheckStream("cublasSetStream_v2", stream)
	s.stream = stream
	return statusSuccess
}

// matrix is one operand: its element type, address, leading dimension and batch stride, and
// its stored shape (rows × cols, column-major).
type matrix struct {
	typ        C.int
	p          unsafe.Pointer
	ld         C.int
	stride     int64
	rows, cols int
}

// size returns the element size, or 0 for a type the stand-in does not compute.
func (m matrix) size() int64 {
	switch m.typ {
	case typeF32:
		return 4
	case typeBF16:
		return 2
	}
	return 0
}

// span is the number of elements the batch touches, from the first.
func (m matrix) span(batch int) int64 {
	if m.rows == 0 || m.cols == 0 {
		return 0
	}
	return int64(batch-1)*m.stride + int64(m.cols-1)*int64(m.ld) + int64(m.rows)
}

// elems returns the batch's elements widened to float32 (bfloat16 is the top half of a
// float32).
func (m matrix) elems(call string, batch int) []float32 {
	n := m.span(batch)
	if n == 0 {
		return nil
	}
	b := cu.DeviceBytes(call, cu.DevicePtr(uintptr(m.p)), n*m.size())
	if m.typ == typeF32 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	h := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
	out := make([]float32, n)
	for i, v := range h {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out
}

//export cublasGemmEx
func cublasGemmEx(h unsafe.Pointer, transa, transb, m, n, k C.int, alpha, a unsafe.Pointer, atype, lda C.int,
	b unsafe.Pointer, btype, ldb C.int, beta, c unsafe.Pointer, ctype, ldc, computeType, algo C.int) C.int {
	return gemm("cublasGemmEx", h, transa, transb, m, n, k, alpha, a, atype, lda, 0, b, btype, ldb, 0,
		beta, c, ctype, ldc, 0, 1, computeType, algo)
}

//export cublasGemmStridedBatchedEx
func cublasGemmStridedBatchedEx(h unsafe.Pointer, transa, transb, m, n, k C.int, alpha, a unsafe.Pointer,
	atype, lda C.int, strideA C.longlong, b unsafe.Pointer, btype, ldb C.int, strideB C.longlong, beta,
	c unsafe.Pointer, ctype, ldc C.int, strideC C.longlong, batchCount, computeType, algo C.int) C.int {
	return gemm("cublasGemmStridedBatchedEx", h, transa, transb, m, n, k, alpha, a, atype, lda, int64(strideA),
		b, btype, ldb, int64(strideB), beta, c, ctype, ldc, int64(strideC), batchCount, computeType, algo)
}

func gemm(call string, h unsafe.Pointer, transa, transb, m, n, k C.int, alpha, a unsafe.Pointer, atype, lda C.int, sa int64,
	b unsafe.Pointer, btype, ldb C.int, sb int64, beta, c unsafe.Pointer, ctype, ldc C.int, sc int64,
	batch, computeType, algo C.int) C.int {
	s := lookup(call, h)
	cu.CheckStream(call, s.stream)
	okOp := func(o C.int) bool { return o == opN || o == opT }
	if !okOp(transa) || !okOp(transb) || m < 0 || n < 0 || k < 0 || batch < 0 || sa < 0 || sb < 0 || sc < 0 {
		return statusInvalidValue
	}
	A := matrix{typ: atype, p: a, ld: lda, stride: sa, rows: int(m), cols: int(k)}
	if transa == opT {
		A.rows, A.cols = int(k), int(m)
	}
	B := matrix{typ: btype, p: b, ld: ldb, stride: sb, rows: int(k), cols: int(n)}
	if transb == opT {
		B.rows, B.cols = int(n), int(k)
	}
	Cm := matrix{typ: ctype, p: c, ld: ldc, stride: sc, rows: int(m), cols: int(n)}
	for _, x := range []matrix{A, B, Cm} {
		if int(x.ld) < max(1, x.rows) {
			return statusInvalidValue
		}
	}
	if computeType != compute32F && computeType != compute32FPedantic || algo != algoDefault && algo != algoDefaultTensorOp {
		return statusNotSupported
	}
	if atype != btype || A.size() == 0 || ctype != typeF32 {
		return statusNotSupported
	}
	if alpha == nil || beta == nil {
		return statusInvalidValue
	}
	if m == 0 || n == 0 || batch == 0 {
		return statusSuccess
	}
	if batch > 1 && sc < Cm.span(1) {
		panic("cuemu: " + call + ": the batch's outputs overlap (strideC smaller than one output)")
	}
	al, be := *(*float32)(alpha), *(*float32)(beta)
	av, bv := A.elems(call+" (A)", int(batch)), B.elems(call+" (B)", int(batch))
	cb := cu.DeviceBytes(call+" (C)", cu.DevicePtr(uintptr(c)), Cm.span(int(batch))*4)
	cv := unsafe.Slice((*float32)(unsafe.Pointer(&cb[0])), len(cb)/4)
	at := func(x []float32, base int64, ld C.int, trans bool, i, j int) float32 {
		if trans {
			i, j = j, i
		}
		return x[base+int64(j)*int64(ld)+int64(i)]
	}
	for z := range int64(batch) {
		for j := range int(n) {
			for i := range int(m) {
				var sum float32
				for l := range int(k) {
					if reverseK {
						l = int(k) - 1 - l
					}
					sum += at(av, z*sa, lda, transa == opT, i, l) * at(bv, z*sb, ldb, transb == opT, l, j)
				}
				p := &cv[z*sc+int64(j)*int64(ldc)+int64(i)]
				if be == 0 {
					*p = al * sum
				} else {
					*p = al*sum + be**p
				}
			}
		}
	}
	return statusSuccess
}
