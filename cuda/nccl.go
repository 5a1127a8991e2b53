//go:build cuda && nccl

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>
#include <cuda.h>

// The few stable NCCL 2.x entry points, declared here: Debian has no libnccl-dev, and the
// library (libnccl.so.2) is loaded at run time.
typedef struct { char internal[128]; } mtrl_nccl_id;
typedef void *mtrl_nccl_comm;
typedef int (*mtrl_get_unique_id_fn)(mtrl_nccl_id *);
typedef int (*mtrl_comm_init_rank_fn)(mtrl_nccl_comm *, int, mtrl_nccl_id, int);
typedef int (*mtrl_all_reduce_fn)(const void *, void *, size_t, int, int, mtrl_nccl_comm, CUstream);
typedef int (*mtrl_broadcast_fn)(const void *, void *, size_t, int, int, mtrl_nccl_comm, CUstream);
typedef int (*mtrl_all_gather_fn)(const void *, void *, size_t, int, mtrl_nccl_comm, CUstream);
typedef int (*mtrl_comm_destroy_fn)(mtrl_nccl_comm);
typedef int (*mtrl_comm_abort_fn)(mtrl_nccl_comm);
typedef const char *(*mtrl_error_string_fn)(int);

static struct {
	void *lib;
	mtrl_get_unique_id_fn get_unique_id;
	mtrl_comm_init_rank_fn comm_init_rank;
	mtrl_all_reduce_fn all_reduce;
	mtrl_broadcast_fn broadcast;
	mtrl_all_gather_fn all_gather;
	mtrl_comm_destroy_fn comm_destroy;
	mtrl_comm_abort_fn comm_abort;
	mtrl_error_string_fn error_string;
} mtrl_nccl;

// mtrl_nccl_load returns NULL on success, else a description of what is missing.
static const char *mtrl_nccl_load(void) {
	if (mtrl_nccl.lib) return NULL;
	void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return dlerror();
#define SYM(field, name) mtrl_nccl.field = dlsym(lib, name); if (!mtrl_nccl.field) return name;
	SYM(get_unique_id, "ncclGetUniqueId")
	SYM(comm_init_rank, "ncclCommInitRank")
	SYM(all_reduce, "ncclAllReduce")
	SYM(broadcast, "ncclBroadcast")
	SYM(all_gather, "ncclAllGather")
	SYM(comm_destroy, "ncclCommDestroy")
	SYM(comm_abort, "ncclCommAbort")
	SYM(error_string, "ncclGetErrorString")
#undef SYM
	mtrl_nccl.lib = lib;
	return NULL;
}
static int mtrl_nccl_get_unique_id(mtrl_nccl_id *id) { return mtrl_nccl.get_unique_id(id); }
static int mtrl_nccl_comm_init_rank(mtrl_nccl_comm *c, int n, mtrl_nccl_id id, int r) { return mtrl_nccl.comm_init_rank(c, n, id, r); }
static int mtrl_nccl_all_reduce(CUdeviceptr buf, size_t n, int dt, int op, mtrl_nccl_comm c, CUstream s) {
	return mtrl_nccl.all_reduce((const void *)buf, (void *)buf, n, dt, op, c, s);
}
#define MTRL_NCCL_UINT8 1 // ncclUint8: broadcast and all-gather move bytes
static int mtrl_nccl_broadcast(CUdeviceptr buf, size_t n, int root, mtrl_nccl_comm c, CUstream s) {
	return mtrl_nccl.broadcast((const void *)buf, (void *)buf, n, MTRL_NCCL_UINT8, root, c, s);
}
static int mtrl_nccl_all_gather(CUdeviceptr send, CUdeviceptr recv, size_t n, mtrl_nccl_comm c, CUstream s) {
	return mtrl_nccl.all_gather((const void *)send, (void *)recv, n, MTRL_NCCL_UINT8, c, s);
}
static int mtrl_nccl_comm_destroy(mtrl_nccl_comm c) { return mtrl_nccl.comm_destroy(c); }
static int mtrl_nccl_comm_abort(mtrl_nccl_comm c) { return mtrl_nccl.comm_abort(c); }
static const char *mtrl_nccl_error_string(int rc) { return mtrl_nccl.error_string(rc); }
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

// NCCL is one rank of an NCCL communicator, on one Backend's device; its collectives reduce
// device tensors in place, queued on the backend's stream. COMPILED ONLY in this project's CI
// (no NCCL and no GPU there): see README "Data-parallel training".
//
// NCCL's ring sums are identical on every rank, so replicas stay bit-identical, but their order
// is not rank order: unlike collective.Run, the result may differ in the last bits from one
// device's.
type NCCL struct {
	b          *Backend
	comm       C.mtrl_nccl_comm
	rank, size int
}

func ncclLoad() error {
	if msg := C.mtrl_nccl_load(); msg != nil {
		return fmt.Errorf("cuda: NCCL: loading libnccl.so.2: %s", C.GoString(msg))
	}
	return nil
}

func ncclErr(call string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: NCCL error %d: %s", call, int(rc), C.GoString(C.mtrl_nccl_error_string(rc)))
}

// NewNCCLUniqueID creates the communicator's id (ncclGetUniqueId); call it on rank 0 only.
func NewNCCLUniqueID() (NCCLUniqueID, error) {
	var id NCCLUniqueID
	if err := ncclLoad(); err != nil {
		return id, err
	}
	var cid C.mtrl_nccl_id
	if err := ncclErr("ncclGetUniqueId", C.mtrl_nccl_get_unique_id(&cid)); err != nil {
		return id, err
	}
	C.memcpy(unsafe.Pointer(&id[0]), unsafe.Pointer(&cid), 128)
	return id, nil
}

// NewNCCL joins rank of size ranks to the communicator id on b's device (ncclCommInitRank,
// which blocks until every rank has joined).
func NewNCCL(b *Backend, id NCCLUniqueID, rank, size int) (*NCCL, error) {
	const op = "cuda.NewNCCL"
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
		return ncclErr("ncclCommInitRank", C.mtrl_nccl_comm_init_rank(&n.comm, C.int(size), cid, C.int(rank)))
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// BootstrapNCCL creates the NCCL communicator of the ranks of c (in-process or MPI), one device
// per rank: rank 0's id travels by c.Broadcast.
func BootstrapNCCL(ctx context.Context, b *Backend, c collective.Comm) (*NCCL, error) {
	var id NCCLUniqueID
	if c.Rank() == 0 {
		var err error
		if id, err = NewNCCLUniqueID(); err != nil {
			return nil, err
		}
	}
	if err := c.Broadcast(ctx, id[:], 0); err != nil {
		return nil, err
	}
	return NewNCCL(b, id, c.Rank(), c.Size())
}

func (n *NCCL) Rank() int { return n.rank }
func (n *NCCL) Size() int { return n.size }

// stream is the backend's CUstream (gorgonia.org/cu keeps it in a one-pointer struct).
func (n *NCCL) stream() C.CUstream {
	return *(*C.CUstream)(unsafe.Pointer(&n.b.stream))
}

// devicePtr is t's device address; it must run on the backend's thread.
func (n *NCCL) devicePtr(op, arg string, t *tensor.Tensor) (C.CUdeviceptr, error) {
	st, off := t.Storage()
	size := t.DType().Size()
	s, err := n.b.own(op, arg, st, off*size, t.Len()*size)
	if err != nil {
		return 0, err
	}
	return C.CUdeviceptr(uintptr(s.ptr) + uintptr(off*size)), nil
}

// AllReduce reduces t (float32, on the backend) in place over every rank, queued on
// the backend's stream.
func (n *NCCL) AllReduce(ctx context.Context, t *tensor.Tensor, op collective.Op) error {
	const name = "cuda.NCCL.AllReduce"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", collective.ErrAborted, err)
	}
	var dt C.int
	switch t.DType() {
	case tensor.Float32:
		dt = ncclFloat32
	default:
		return tensor.Errorf(tensor.ErrDType, name, "t", "is %v, want float32", t.DType())
	}
	var rop C.int
	switch op {
	case collective.Sum:
		rop = ncclSum
	case collective.Max:
		rop = ncclMax
	case collective.Min:
		rop = ncclMin
	default:
		return tensor.Errorf(tensor.ErrParam, name, "op", "unknown reduction %v", op)
	}
	return n.b.do(name, func() error {
		p, err := n.devicePtr(name, "t", t)
		if err != nil {
			return err
		}
		return ncclErr("ncclAllReduce", C.mtrl_nccl_all_reduce(p, C.size_t(t.Len()), dt, rop, n.comm, n.stream()))
	})
}

// Broadcast copies root's t into every rank's t (bytes; any dtype), queued on the stream.
func (n *NCCL) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	const name = "cuda.NCCL.Broadcast"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", collective.ErrAborted, err)
	}
	if root < 0 || root >= n.size {
		return tensor.Errorf(tensor.ErrParam, name, "root", "is %d, want [0, %d)", root, n.size)
	}
	return n.b.do(name, func() error {
		p, err := n.devicePtr(name, "t", t)
		if err != nil {
			return err
		}
		return ncclErr("ncclBroadcast", C.mtrl_nccl_broadcast(p, C.size_t(t.Len()*t.DType().Size()), C.int(root), n.comm, n.stream()))
	})
}

// AllGather writes every rank's src, in rank order, into dst (Size times src's elements, same
// dtype), queued on the stream.
func (n *NCCL) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	const name = "cuda.NCCL.AllGather"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", collective.ErrAborted, err)
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
		return ncclErr("ncclAllGather", C.mtrl_nccl_all_gather(s, d, C.size_t(src.Len()*src.DType().Size()), n.comm, n.stream()))
	})
}

// Abort tears the communicator down without waiting for the other ranks (ncclCommAbort): the
// way out when another rank failed.
func (n *NCCL) Abort() error {
	return n.b.do("cuda.NCCL.Abort", func() error { return ncclErr("ncclCommAbort", C.mtrl_nccl_comm_abort(n.comm)) })
}

// Close destroys the communicator (ncclCommDestroy).
func (n *NCCL) Close() error {
	return n.b.do("cuda.NCCL.Close", func() error { return ncclErr("ncclCommDestroy", C.mtrl_nccl_comm_destroy(n.comm)) })
}
