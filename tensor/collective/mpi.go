//go:build mpi

package collective

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

static int mtrl_mpi_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) {
		return MPI_Query_thread(provided);
	}
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
}
static int mtrl_mpi_serialized(int provided) { return provided >= MPI_THREAD_SERIALIZED; }
static int mtrl_mpi_rank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int mtrl_mpi_size(int *n) { return MPI_Comm_size(MPI_COMM_WORLD, n); }
static MPI_Op mtrl_op(int op) { return op == 1 ? MPI_MAX : MPI_MIN; }
static int mtrl_allreduce_f32(float *buf, int n, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, mtrl_op(op), MPI_COMM_WORLD);
}
static int mtrl_allreduce_f64(double *buf, int n, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, mtrl_op(op), MPI_COMM_WORLD);
}
static int mtrl_bcast(void *buf, int n, int root) {
	return MPI_Bcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD);
}
static int mtrl_allgather(void *send, int n, void *recv) {
	return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD);
}
static int mtrl_alltoall_counts(long long *send, long long *recv) {
	return MPI_Alltoall(send, 1, MPI_LONG_LONG, recv, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
}
static int mtrl_alltoallv(void *send, int *scounts, int *sdispls, void *recv, int *rcounts, int *rdispls) {
	return MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, MPI_COMM_WORLD);
}
static int mtrl_reduce_scatter_f32(float *send, float *recv, int *counts) {
	return MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static int mtrl_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
static int mtrl_finalize(void) { return MPI_Finalize(); }
static int mtrl_abort(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// MPIComm is MPI_COMM_WORLD of OpenMPI: one rank per process, started by mpirun. Its calls
// block until every process makes them and cannot be cancelled: a process that fails should
// call MPIAbort, which ends the whole job, rather than leave the others waiting. Sums are
// all-gathers reduced in rank order on every process (bit-identical on every rank, whatever
// algorithm the MPI library picks); max and min use MPI_Allreduce with MPI_IN_PLACE (exact in
// any order).
type MPIComm struct {
	mu         sync.Mutex // MPI_THREAD_SERIALIZED at least: one call at a time
	rank, size int
}

var (
	mpiOnce sync.Once
	mpiComm *MPIComm
	mpiErr  error
)

// MPI initialises MPI once (MPI_Init_thread) and returns the world communicator.
func MPI() (*MPIComm, error) {
	mpiOnce.Do(func() {
		var provided C.int
		if rc := C.mtrl_mpi_init(&provided); rc != 0 {
			mpiErr = fmt.Errorf("collective: MPI_Init_thread: error %d", int(rc))
			return
		}
		if C.mtrl_mpi_serialized(provided) == 0 {
			mpiErr = fmt.Errorf("collective: MPI provides thread level %d, want MPI_THREAD_SERIALIZED or more (goroutines move between threads)", int(provided))
			return
		}
		var r, n C.int
		if rc := C.mtrl_mpi_rank(&r); rc != 0 {
			mpiErr = fmt.Errorf("collective: MPI_Comm_rank: error %d", int(rc))
			return
		}
		if rc := C.mtrl_mpi_size(&n); rc != 0 {
			mpiErr = fmt.Errorf("collective: MPI_Comm_size: error %d", int(rc))
			return
		}
		mpiComm = &MPIComm{rank: int(r), size: int(n)}
	})
	return mpiComm, mpiErr
}

// MPIFinalize ends MPI (MPI_Finalize); call it once, after the last collective.
func MPIFinalize() error {
	if rc := C.mtrl_finalize(); rc != 0 {
		return fmt.Errorf("collective: MPI_Finalize: error %d", int(rc))
	}
	return nil
}

// MPIAbort ends every process of the job with code (MPI_Abort).
func MPIAbort(code int) { C.mtrl_abort(C.int(code)) }

func (c *MPIComm) Rank() int { return c.rank }
func (c *MPIComm) Size() int { return c.size }

func (c *MPIComm) call(ctx context.Context, name string, f func() C.int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrAborted, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := f(); rc != 0 {
		return fmt.Errorf("collective: %s: MPI error %d", name, int(rc))
	}
	return nil
}

func count(n int) (C.int, error) {
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("collective: %d elements in one MPI call, want at most %d", n, math.MaxInt32)
	}
	return C.int(n), nil
}

func (c *MPIComm) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	if op == Sum {
		return gatherReduce(ctx, c, buf, op)
	}
	return c.allReduce(ctx, len(buf), op, func(n, op C.int) C.int {
		return C.mtrl_allreduce_f32((*C.float)(unsafe.Pointer(&buf[0])), n, op)
	})
}

func (c *MPIComm) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	if op == Sum {
		return gatherReduce(ctx, c, buf, op)
	}
	return c.allReduce(ctx, len(buf), op, func(n, op C.int) C.int {
		return C.mtrl_allreduce_f64((*C.double)(unsafe.Pointer(&buf[0])), n, op)
	})
}

// allReduce runs MPI_Allreduce (max or min, in place) of len elements through f.
func (c *MPIComm) allReduce(ctx context.Context, len int, op Op, f func(n, op C.int) C.int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	n, err := count(len)
	if err != nil || n == 0 {
		return err
	}
	return c.call(ctx, "MPI_Allreduce", func() C.int { return f(n, C.int(op)) })
}

func (c *MPIComm) Broadcast(ctx context.Context, buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("collective: broadcast root %d outside [0, %d)", root, c.size)
	}
	n, err := count(len(buf))
	if err != nil || n == 0 {
		return err
	}
	return c.call(ctx, "MPI_Bcast", func() C.int { return C.mtrl_bcast(unsafe.Pointer(&buf[0]), n, C.int(root)) })
}

func (c *MPIComm) AllGather(ctx context.Context, send, recv []byte) error {
	if len(recv) != len(send)*c.size {
		return fmt.Errorf("collective: all-gather of %d bytes from %d ranks into %d bytes, want %d", len(send), c.size, len(recv), len(send)*c.size)
	}
	n, err := count(len(send))
	if err != nil || n == 0 {
		return err
	}
	return c.call(ctx, "MPI_Allgather", func() C.int {
		return C.mtrl_allgather(unsafe.Pointer(&send[0]), n, unsafe.Pointer(&recv[0]))
	})
}

func (c *MPIComm) Barrier(ctx context.Context) error {
	return c.call(ctx, "MPI_Barrier", func() C.int { return C.mtrl_barrier() })
}

// allToAll is MPI_Alltoallv of bytes, after an MPI_Alltoall of the pieces' lengths.
func (c *MPIComm) allToAll(ctx context.Context, send [][]byte) ([][]byte, error) {
	scount, rcount := make([]C.longlong, c.size), make([]C.longlong, c.size)
	for q, p := range send {
		scount[q] = C.longlong(len(p))
	}
	if err := c.call(ctx, "MPI_Alltoall", func() C.int { return C.mtrl_alltoall_counts(&scount[0], &rcount[0]) }); err != nil {
		return nil, err
	}
	sc, sd, rc, rd := make([]C.int, c.size), make([]C.int, c.size), make([]C.int, c.size), make([]C.int, c.size)
	var stotal, rtotal int
	for q := range c.size {
		if rcount[q] < 0 || int64(rcount[q]) > math.MaxInt32 || stotal+len(send[q]) > math.MaxInt32 || rtotal+int(rcount[q]) > math.MaxInt32 {
			return nil, fmt.Errorf("collective: all-to-all of more than %d bytes in one MPI call", math.MaxInt32)
		}
		sc[q], sd[q], rc[q], rd[q] = C.int(len(send[q])), C.int(stotal), C.int(rcount[q]), C.int(rtotal)
		stotal += len(send[q])
		rtotal += int(rcount[q])
	}
	// MPI needs valid buffers even when every count is zero.
	sbuf, rbuf := make([]byte, max(1, stotal)), make([]byte, max(1, rtotal))
	for q, p := range send {
		copy(sbuf[sd[q]:], p)
	}
	err := c.call(ctx, "MPI_Alltoallv", func() C.int {
		return C.mtrl_alltoallv(unsafe.Pointer(&sbuf[0]), &sc[0], &sd[0], unsafe.Pointer(&rbuf[0]), &rc[0], &rd[0])
	})
	if err != nil {
		return nil, err
	}
	recv := make([][]byte, c.size)
	for q := range recv {
		recv[q] = rbuf[rd[q] : int(rd[q])+int(rc[q])]
	}
	return recv, nil
}

// reduceScatterFloat32 is MPI_Reduce_scatter (sum) into Shard's layout.
func (c *MPIComm) reduceScatterFloat32(ctx context.Context, buf, shard []float32) error {
	if _, err := count(len(buf)); err != nil {
		return err
	}
	counts := make([]C.int, c.size)
	for q := range counts {
		lo, hi := Shard(len(buf), q, c.size)
		counts[q] = C.int(hi - lo)
	}
	if len(buf) == 0 {
		return nil
	}
	recv := shard
	if len(recv) == 0 { // MPI needs a valid receive buffer
		recv = make([]float32, 1)
	}
	return c.call(ctx, "MPI_Reduce_scatter", func() C.int {
		return C.mtrl_reduce_scatter_f32((*C.float)(unsafe.Pointer(&buf[0])), (*C.float)(unsafe.Pointer(&recv[0])), &counts[0])
	})
}
