// Package collective moves tensors between the ranks of a data-parallel job: all-reduce (sum,
// max, min, in place), broadcast, all-gather and barrier over a fixed set of ranks.
//
// Three implementations share the Comm interface:
//
//   - Run starts N ranks as goroutines of one process (golang.org/x/sync/errgroup), one device
//     each; it is always built.
//   - MPI (build tag mpi) is OpenMPI through cgo: one rank per process, launched with mpirun,
//     on one machine or many.
//   - NCCL (package cuda, build tags cuda and nccl) reduces CUDA device buffers; it is
//     bootstrapped by one of the above.
//
// Tensors is the same collectives on tensor.Tensor values, implemented by HostTensors (any
// Comm; a device tensor goes through host memory) and by cuda.NCCL (device buffers, no host
// staging), so gradient code can use either.
//
// Sharded reductions work on top of any Comm: ReduceScatterFloat32 and AllGatherShards (an
// all-reduce in 2·(N−1)/N of the values per rank), OrderedReduceScatter (OrderedSum's result,
// shard by shard) and AllToAll; the in-process group and MPI run them natively
// (MPI_Reduce_scatter, MPI_Alltoallv), other Comms through an all-gather.
//
// Hierarchical composes an in-process group with a process-level Comm (N goroutine ranks in
// each of M MPI processes: a world of M·N ranks).
//
// Every collective takes a context. When a rank fails, cancelling the context it shares with the
// others (Run does this for the errgroup) makes the collectives they are blocked in return an
// error wrapping ErrAborted instead of hanging; MPI cannot be interrupted that way and aborts
// the job (MPI_Abort) instead.
//
// Sums are deterministic: every implementation reduces in rank order (rank 0 + rank 1 + …),
// with the same arithmetic on every rank, so all ranks receive bit-identical results and
// replicas that apply the same update hold bit-identical weights.
package collective
