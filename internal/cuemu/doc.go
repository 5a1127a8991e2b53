// Package cu is a CPU emulation of the part of gorgonia.org/cu (the CUDA driver API) that
// mtrl's cuda package uses, so that package cuda, its kernels and its tests run unchanged on a
// machine without a GPU. It is never imported under its own path: scripts/cuda-emu builds with a
// copy of go.mod that replaces gorgonia.org/cu by this directory.
//
// # What is emulated, and checked
//
// Device memory is host memory from the C allocator, 256-byte aligned and filled with 0xff bytes
// (a NaN in every float format, -1 in every integer) at allocation, so reads of memory nobody
// wrote show up in results. Every copy and memset must lie inside one live allocation of the
// current context, a device-to-device copy must not overlap itself (undefined on a GPU), and
// every pointer argument of a launch must be null or point into a live allocation.
//
// Every call must come from an OS thread on which a context is current (cuCtxCreate makes the
// new context current on the calling thread, and nothing here moves it): the rule the cuda
// backend relies on when it locks its goroutine to one OS thread.
//
// LoadData parses the PTX: a launch must name an .entry of a loaded module, pass exactly the
// parameters the entry declares, respect its .maxntid, and each parameter is read at the size
// the PTX declares from the 8 bytes that gorgonia.org/cu's Function.Launch copies from each
// parameter pointer — the argument widening that must be right on a real GPU. The compiled
// kernel's C++ signature must agree with the PTX parameter sizes (a stale PTX fails here).
//
// The kernels are the .cu sources of cuda/kernels compiled unchanged as C++ against cuemu.h, a
// header implementing the execution model they use. Each thread of a block is a fiber on its
// own stack (switch_amd64.S, no system call per switch); a block's threads interleave at every
// __syncthreads and warp shuffle (__shfl_xor_sync, __shfl_sync). A barrier that some threads skip, a shuffle with a missing
// lane or a deadlock between the two aborts the launch with the kernel's name (a panic, like
// the crash or hang it would be on a GPU). CUEMU_ORDER=reverse runs blocks and the threads of a
// block in reverse order, which changes the results of order-dependent code.
//
// The kernels are compiled from generated copies (zz_*.cc, one per .cu with its local headers
// inlined and #line directives pointing at the original files), because cgo does not track
// #included files: `go generate` here (scripts/cuda-emu always runs it) rewrites them, so an
// edited kernel is recompiled, and LoadData refuses to run when a source changed since the last
// generation.
//
// # cuBLAS
//
// The subpackage blas replaces gorgonia.org/cu/blas as this package replaces gorgonia.org/cu:
// it defines the cuBLAS C entry points package cuda binds (handles, stream, cublasGemmEx,
// cublasGemmStridedBatchedEx) and computes the GEMMs on the host with the checks above (see its
// doc).
//
// # NCCL
//
// nccl.go defines the libnccl C entry points package cuda binds (declared weak there, so the
// program's own definitions win over dlopening libnccl.so.2): unique ids, ncclCommInitRank
// (on the device of the calling thread's context, blocking until every rank joined) and
// ncclCommInitAll, all-reduce (sum, prod, max, min), reduce-scatter, all-gather, broadcast,
// ncclGroupStart/End, destroy, abort, error strings and ncclGetLastError. A collective waits
// until every rank has issued it, then runs in rank order (deterministic; the arithmetic of
// package collective's host reductions). Each rank's buffers must lie in memory of its device
// and its stream belong to that device, else the call panics; two ranks on one device and
// ranks that disagree (collective, count, type, reduction, root) get ncclInvalidUsage.
//
// # Environment
//
//	CUEMU_DEVICES   number of devices (default 1)
//	CUEMU_SMS       multiprocessor count each device reports (default 132, an H100 SXM)
//	CUEMU_MEMORY    bytes of memory per device (default 8 GiB); beyond it cuMemAlloc fails
//	CUEMU_ORDER     "reverse" runs blocks and threads in reverse order
//	CUEMU_LAUNCH_LOG a file to which each kernel's name is appended at its first launch
//
// Opt-in modes that behave as a GPU does where the default is stricter or simpler, each to
// expose a class of bug the default hides (modes_test.go plants one for each):
//
//	CUEMU_ALLOC=reuse   cuMemFree'd ranges are handed out again, the last freed first (a range
//	                    at most twice the request), with the bytes they held: a cache keyed by
//	                    a device address goes stale, and memory read before it is written holds
//	                    an earlier buffer's finite values instead of NaN
//	CUEMU_SHARED=stale  shared memory is not refilled with 0xff before a block: a block reads
//	                    what the kernel's previous block (or launch) left in its variables, as a
//	                    GPU leaves it (there, any kernel's), where the NaN fill can vanish in
//	                    fmaxf or a comparison
//	CUEMU_ASYNC=deferred a created stream's launches, memsets and device-to-device copies wait
//	                    in its queue until a synchronising call: cuStreamSynchronize, a
//	                    synchronous copy (the legacy stream: it waits for blocking streams
//	                    only), cuMemFree, a cuBLAS or NCCL stand-in call, cuCtxDestroy; a
//	                    download that relies on ordering a non-blocking stream lacks reads old
//	                    values
//	CUEMU_BLAS=reverse  the cuBLAS stand-in sums each product over k in descending order (cuBLAS
//	                    picks its order by the shapes): a result that holds in one order only
//	                    shows, and how much one depends on the order
//
// # What is not emulated
//
// Asynchrony by default (every call completes before it returns, so missing stream
// synchronisation goes unseen; CUEMU_ASYNC=deferred queues per stream, in issue order, and runs
// the queues at the synchronising calls, not concurrently), concurrency between streams,
// NCCL's ring order, transports and timeouts, PTX itself (only its entry declarations are read;
// the JIT is not),
// real driver error codes beyond the few returned here, the device's libm (expf and friends
// are the host C library's, not CUDA's ≤2-ulp versions), warp-synchronous timing, speed.
// Launches are serialised process-wide. x86-64 Linux only.
package cu

//go:generate go run ./gen -o . ../../cuda/kernels selftest ../../cuda/testdata ../../examples/internal/vlm/kernels
