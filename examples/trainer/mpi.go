//go:build mpi

package main

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// processComm is the process-level group of training.nnodes > 1: MPI_COMM_WORLD, whose size
// must be nnodes (mpirun -np <nnodes>).
func processComm(nnodes int) (collective.Comm, error) {
	if nnodes <= 1 {
		return nil, nil
	}
	c, err := collective.MPI()
	if err != nil {
		return nil, err
	}
	if c.Size() != nnodes {
		return nil, fmt.Errorf("config: training.nnodes is %d but MPI started %d processes: run mpirun -np %d", nnodes, c.Size(), nnodes)
	}
	mpiUsed = true
	return c, nil
}

var mpiUsed bool

// finishProcess ends MPI: MPI_Finalize after a run that succeeded, MPI_Abort after one that
// failed (the other processes may be blocked in a collective and would wait forever).
func finishProcess(failed bool) {
	if !mpiUsed {
		return
	}
	if failed {
		collective.MPIAbort(1)
	}
	_ = collective.MPIFinalize()
}
