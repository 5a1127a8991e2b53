//go:build cuda && nccl

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

// The stable NCCL 2.x entry points, declared here (Debian has no libnccl-dev) and weak: a
// program that defines them itself (the CUDA emulator's stand-in, internal/cuemu) uses its
// own, any other loads libnccl.so.2 at run time. Streams are CUstreams, buffers device
// addresses; neither needs a CUDA header.
typedef struct { char internal[128]; } mtrl_nccl_id;
typedef void *mtrl_nccl_comm;
extern int ncclGetUniqueId(mtrl_nccl_id *) __attribute__((weak));
extern int ncclCommInitRank(mtrl_nccl_comm *, int, mtrl_nccl_id, int) __attribute__((weak));
extern int ncclAllReduce(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *) __attribute__((weak));
extern int ncclReduceScatter(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *) __attribute__((weak));
extern int ncclBroadcast(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *) __attribute__((weak));
extern int ncclAllGather(const void *, void *, size_t, int, mtrl_nccl_comm, void *) __attribute__((weak));
extern int ncclCommDestroy(mtrl_nccl_comm) __attribute__((weak));
extern int ncclCommAbort(mtrl_nccl_comm) __attribute__((weak));
extern const char *ncclGetErrorString(int) __attribute__((weak));
extern const char *ncclGetLastError(mtrl_nccl_comm) __attribute__((weak));

static struct {
	int ready, own;
	int (*get_unique_id)(mtrl_nccl_id *);
	int (*comm_init_rank)(mtrl_nccl_comm *, int, mtrl_nccl_id, int);
	int (*all_reduce)(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *);
	int (*reduce_scatter)(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *);
	int (*broadcast)(const void *, void *, size_t, int, int, mtrl_nccl_comm, void *);
	int (*all_gather)(const void *, void *, size_t, int, mtrl_nccl_comm, void *);
	int (*comm_destroy)(mtrl_nccl_comm);
	int (*comm_abort)(mtrl_nccl_comm);
	const char *(*error_string)(int);
	const char *(*last_error)(mtrl_nccl_comm); // NCCL >= 2.13; may be NULL
} mtrl_nccl;

// mtrl_nccl_load returns NULL on success, else a description of what is missing.
static const char *mtrl_nccl_load(void) {
	if (mtrl_nccl.ready) return NULL;
	if (ncclGetUniqueId && ncclCommInitRank && ncclAllReduce && ncclReduceScatter && ncclBroadcast &&
		ncclAllGather && ncclCommDestroy && ncclCommAbort && ncclGetErrorString) {
		mtrl_nccl.get_unique_id = ncclGetUniqueId;
		mtrl_nccl.comm_init_rank = ncclCommInitRank;
		mtrl_nccl.all_reduce = ncclAllReduce;
		mtrl_nccl.reduce_scatter = ncclReduceScatter;
		mtrl_nccl.broadcast = ncclBroadcast;
		mtrl_nccl.all_gather = ncclAllGather;
		mtrl_nccl.comm_destroy = ncclCommDestroy;
		mtrl_nccl.comm_abort = ncclCommAbort;
		mtrl_nccl.error_string = ncclGetErrorString;
		mtrl_nccl.last_error = ncclGetLastError;
		mtrl_nccl.own = mtrl_nccl.ready = 1;
		return NULL;
	}
	void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return dlerror();
#define SYM(field, name) *(void **)&mtrl_nccl.field = dlsym(lib, name); if (!mtrl_nccl.field) return name;
	SYM(get_unique_id, "ncclGetUniqueId")
	SYM(comm_init_rank, "ncclCommInitRank")
	SYM(all_reduce, "ncclAllReduce")
	SYM(reduce_scatter, "ncclReduceScatter")
	SYM(broadcast, "ncclBroadcast")
	SYM(all_gather, "ncclAllGather")
	SYM(comm_destroy, "ncclCommDestroy")
	SYM(comm_abort, "ncclCommAbort")
	SYM(error_string, "ncclGetErrorString")
#undef SYM
	*(void **)&mtrl_nccl.last_error = dlsym(lib, "ncclGetLastError");
	mtrl_nccl.ready = 1;
	return NULL;
}
static int mtrl_nccl_own(void) { return mtrl_nccl.own; }
static int mtrl_nccl_get_unique_id(mtrl_nccl_id *id) { return mtrl_nccl.get_unique_id(id); }
static int mtrl_nccl_comm_init_rank(mtrl_nccl_comm *c, int n, mtrl_nccl_id id, int r) { return mtrl_nccl.comm_init_rank(c, n, id, r); }
static int mtrl_nccl_all_reduce(unsigned long long buf, size_t n, int dt, int op, mtrl_nccl_comm c, void *s) {
	return mtrl_nccl.all_reduce((const void *)buf, (void *)buf, n, dt, op, c, s);
}
static int mtrl_nccl_reduce_scatter(unsigned long long send, unsigned long long recv, size_t n, int dt, int op, mtrl_nccl_comm c, void *s) {
	return mtrl_nccl.reduce_scatter((const void *)send, (void *)recv, n, dt, op, c, s);
}
#define MTRL_NCCL_UINT8 1 // ncclUint8: broadcast and all-gather move bytes
static int mtrl_nccl_broadcast(unsigned long long buf, size_t n, int root, mtrl_nccl_comm c, void *s) {
	return mtrl_nccl.broadcast((const void *)buf, (void *)buf, n, MTRL_NCCL_UINT8, root, c, s);
}
static int mtrl_nccl_all_gather(unsigned long long send, unsigned long long recv, size_t n, mtrl_nccl_comm c, void *s) {
	return mtrl_nccl.all_gather((const void *)send, (void *)recv, n, MTRL_NCCL_UINT8, c, s);
}
static int mtrl_nccl_comm_destroy(mtrl_nccl_comm c) { return mtrl_nccl.comm_destroy(c); }
static int mtrl_nccl_comm_abort(mtrl_nccl_comm c) { return mtrl_nccl.comm_abort(c); }
static const char *mtrl_nccl_error_string(int rc) { return mtrl_nccl.error_string(rc); }
static const char *mtrl_nccl_last_error(mtrl_nccl_comm c) { return mtrl_nccl.last_error && c ? mtrl_nccl.last_error(c) : ""; }
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// NCCL's enum values (nccl.h, stable across 2.x).
const (
	ncclFloat32 = 7
	ncclSum     = 0
	ncclMax     = 2
	ncclMin     = 3
)

// NCCLUniqueID is the ncclUniqueId that rank 0 creates and every rank must receive (by MPI or
// in-process broadcast) before NewNCCL.
type NCCLUniqueID [128]byte

// NCCL is one rank of an NCCL communicator, on one Backend's device; its collectives work on
// device tensors (no host staging), queued on the backend's stream. It implements
// collective.Tensors. Under scripts/cuda-emu it runs on the emulator's libnccl stand-in, which
// reduces in rank order: bit for bit collective.HostTensors' results (TestNCCLCollectives). On
// real NCCL, whose ring sums are identical on every rank but not in rank order, replicas stay
// bit-identical to each other and may differ from one device's in the last bits; that path is
// compiled, not run, in this project's CI (no GPU there).
//
// A collective blocks the backend's thread until NCCL has queued it (on the emulator: until
// every rank has issued it); ctx is checked before, not during. When a rank fails, Abort
// releases the others.
type NCCL struct {
	b          *Backend
	comm       C.mtrl_nccl_comm
	rank, size int
}

var _ collective.Tensors = (*NCCL)(nil)

func ncclLoad() error {
	if msg := C.mtrl_nccl_load(); msg != nil {
		return fmt.Errorf("cuda: NCCL: loading libnccl.so.2: %s", C.GoString(msg))
	}
	return nil
}

// NCCLLinked reports whether the program defines NCCL's entry points itself (the CUDA
// emulator's stand-in), so that no libnccl.so.2 is loaded. It loads NCCL if it was not yet.
func NCCLLinked() bool { return ncclLoad() == nil && C.mtrl_nccl_own() != 0 }

// ncclErr describes a failed NCCL call, with ncclGetLastError's explanation when there is one.
func ncclErr(call string, rc C.int, comm C.mtrl_nccl_comm) error {
	if rc == 0 {
		return nil
	}
	msg := C.GoString(C.mtrl_nccl_error_string(rc))
	if last := C.GoString(C.mtrl_nccl_last_error(comm)); last != "" {
		msg += ": " + last
	}
	return tensor.Errorf(tensor.ErrDevice, "cuda.NCCL", "", "%s: NCCL error %d: %s", call, int(rc), msg)
}

// NewNCCLUniqueID creates the communicator's id (ncclGetUniqueId); call it on rank 0 only.
func NewNCCLUniqueID() (NCCLUniqueID, error) {
	var id NCCLUniqueID
	if err := ncclLoad(); err != nil {
		return id, err
	}
	var cid C.mtrl_nccl_id
	if err := ncclErr("ncclGetUniqueId", C.mtrl_nccl_get_unique_id(&cid), nil); err != nil {
		return id, err
	}
	C.memcpy(unsafe.Pointer(&id[0]), unsafe.Pointer(&cid), 128)
	return id, nil
}

// NewNCCL joins rank of size ranks to the communicator id on b's device (ncclCommInitRank,
// which blocks until every rank has joined).
func NewNCCL(b *Backend, id NCCLUniqueID, rank, size int) (*NCCL, error) {
	const op = "cuda.NewNCCL"
	if b == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "b", "is nil")
	}
	if rank < 0 || rank >= size {
		return nil, tensor.Errorf(tensor.ErrParam, op, "rank", "is %d, want [0, %d)", rank, size)
	}
	if err := ncclLoad(); err != nil {
		return nil, err
	}
	n := &NCCL{b: b, rank: rank, size: size}
	var cid C.mtrl_nccl_id
	C.memcpy(unsafe.Pointer(&cid), unsafe.Pointer(&id[0]), 128)
	err := b.do(op, func() error {
		return ncclErr("ncclCommInitRank", C.mtrl_nccl_comm_init_rank(&n.comm, C.int(size), cid, C.int(rank)), nil)
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// BootstrapNCCL creates the NCCL communicator of the ranks of c (in-process or MPI), one device
// per rank: rank 0's id travels by c.Broadcast.
func BootstrapNCCL(ctx context.Context, b *Backend, c collective.Comm) (*NCCL, error) {
	if c == nil {
		return nil, tensor.Errorf(tensor.ErrParam, "cuda.BootstrapNCCL", "c", "is nil")
	}
	var id NCCLUniqueID
	var idErr error
	if c.Rank() == 0 {
		id, idErr = NewNCCLUniqueID()
	}
	// Every rank learns whether rank 0 has an id, so none waits in ncclCommInitRank for it.
	ok := []float64{1}
	if idErr != nil {
		ok[0] = 0
	}
	if err := c.AllReduceFloat64(ctx, ok, collective.Min); err != nil {
		return nil, err
	}
	if idErr != nil {
		return nil, idErr
	}
	if ok[0] == 0 {
		return nil, fmt.Errorf("cuda: NCCL: rank 0 could not create the communicator's id")
	}
	if err := c.Broadcast(ctx, id[:], 0); err != nil {
		return nil, err
	}
	return NewNCCL(b, id, c.Rank(), c.Size())
}

// Rank is this rank's index in [0, Size).
func (n *NCCL) Rank() int { return n.rank }

// Size is the number of ranks.
func (n *NCCL) Size() int { return n.size }

// stream is the backend's CUstream, as gorgonia.org/cu's Stream.C gives it (the emulator
// checks that it is a stream of the communicator's device).
func (n *NCCL) stream() unsafe.Pointer { return unsafe.Pointer(n.b.stream.C()) }

// devicePtr is t's device address; it must run on the backend's thread.
func (n *NCCL) devicePtr(op, arg string, t *tensor.Tensor) (C.ulonglong, error) {
	st, off := t.Storage()
	size := t.DType().Size()
	s, err := n.b.own(op, arg, st, off*size, t.Len()*size)
	if err != nil {
		return 0, err
	}
	return C.ulonglong(uintptr(s.ptr) + uintptr(off*size)), nil
}

// begin checks what every collective shares: a live context, a tensor on this backend.
func (n *NCCL) begin(ctx context.Context, name string, ts map[string]*tensor.Tensor) error {
	if ctx == nil {
		return tensor.Errorf(tensor.ErrParam, name, "ctx", "is nil (use context.Background())")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", collective.ErrAborted, err)
	}
	for arg, t := range ts {
		if err := tensor.CheckTensor(name, arg, t); err != nil {
			return err
		}
		if t.Backend() != tensor.Backend(n.b) {
			return tensor.Errorf(tensor.ErrBackend, name, arg, "is on %s, the communicator's device is %s", t.Backend().Name(), n.b.Name())
		}
	}
	return nil
}

// ncclRedOp is op's ncclRedOp_t.
func ncclRedOp(name string, op collective.Op) (C.int, error) {
	switch op {
	case collective.Sum:
		return ncclSum, nil
	case collective.Max:
		return ncclMax, nil
	case collective.Min:
		return ncclMin, nil
	}
	return 0, tensor.Errorf(tensor.ErrParam, name, "op", "unknown reduction %v", op)
}

// AllReduce reduces t (float32, on the backend) in place over every rank (ncclAllReduce).
func (n *NCCL) AllReduce(ctx context.Context, t *tensor.Tensor, op collective.Op) error {
	const name = "cuda.NCCL.AllReduce"
	if err := n.begin(ctx, name, map[string]*tensor.Tensor{"t": t}); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "t", t, tensor.Float32); err != nil {
		return err
	}
	rop, err := ncclRedOp(name, op)
	if err != nil {
		return err
	}
	return n.b.do(name, func() error {
		p, err := n.devicePtr(name, "t", t)
		if err != nil {
			return err
		}
		return ncclErr("ncclAllReduce", C.mtrl_nccl_all_reduce(p, C.size_t(t.Len()), ncclFloat32, rop, n.comm, n.stream()), n.comm)
	})
}

// ReduceScatter sums src (float32, Size·dst.Len() elements) over every rank and writes chunk
// Rank of the sum into dst (ncclReduceScatter).
func (n *NCCL) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor) error {
	const name = "cuda.NCCL.ReduceScatter"
	if err := n.begin(ctx, name, map[string]*tensor.Tensor{"dst": dst, "src": src}); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "dst", dst, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckDType(name, "src", src, tensor.Float32); err != nil {
		return err
	}
	if src.Len() != n.size*dst.Len() {
		return tensor.Errorf(tensor.ErrShape, name, "src", "has %d elements, want %d ranks × dst's %d", src.Len(), n.size, dst.Len())
	}
	return n.b.do(name, func() error {
		s, err := n.devicePtr(name, "src", src)
		if err != nil {
			return err
		}
		d, err := n.devicePtr(name, "dst", dst)
		if err != nil {
			return err
		}
		return ncclErr("ncclReduceScatter", C.mtrl_nccl_reduce_scatter(s, d, C.size_t(dst.Len()), ncclFloat32, ncclSum, n.comm, n.stream()), n.comm)
	})
}

// Broadcast copies root's t into every rank's t (bytes; any dtype; ncclBroadcast).
func (n *NCCL) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	const name = "cuda.NCCL.Broadcast"
	if err := n.begin(ctx, name, map[string]*tensor.Tensor{"t": t}); err != nil {
		return err
	}
	if root < 0 || root >= n.size {
		return tensor.Errorf(tensor.ErrParam, name, "root", "is %d, want [0, %d)", root, n.size)
	}
	return n.b.do(name, func() error {
		p, err := n.devicePtr(name, "t", t)
		if err != nil {
			return err
		}
		return ncclErr("ncclBroadcast", C.mtrl_nccl_broadcast(p, C.size_t(t.Len()*t.DType().Size()), C.int(root), n.comm, n.stream()), n.comm)
	})
}

// AllGather writes every rank's src, in rank order, into dst (Size times src's elements, same
// dtype; ncclAllGather).
func (n *NCCL) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	const name = "cuda.NCCL.AllGather"
	if err := n.begin(ctx, name, map[string]*tensor.Tensor{"dst": dst, "src": src}); err != nil {
		return err
	}
	if dst.DType() != src.DType() || dst.Len() != src.Len()*n.size {
		return tensor.Errorf(tensor.ErrShape, name, "dst", "has %d %v, want %d %v", dst.Len(), dst.DType(), src.Len()*n.size, src.DType())
	}
	return n.b.do(name, func() error {
		s, err := n.devicePtr(name, "src", src)
		if err != nil {
			return err
		}
		d, err := n.devicePtr(name, "dst", dst)
		if err != nil {
			return err
		}
		return ncclErr("ncclAllGather", C.mtrl_nccl_all_gather(s, d, C.size_t(src.Len()*src.DType().Size()), n.comm, n.stream()), n.comm)
	})
}

// Abort tears the communicator down without waiting for the other ranks (ncclCommAbort): the
// way out when another rank failed. It does not go through the backend's thread, which may be
// the one waiting in a collective.
func (n *NCCL) Abort() error {
	return ncclErr("ncclCommAbort", C.mtrl_nccl_comm_abort(n.comm), nil)
}

// Close destroys the communicator (ncclCommDestroy).
func (n *NCCL) Close() error {
	return n.b.do("cuda.NCCL.Close", func() error { return ncclErr("ncclCommDestroy", C.mtrl_nccl_comm_destroy(n.comm), nil) })
}
