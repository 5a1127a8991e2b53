//go:build !mpi

package main

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor/collective"
)

// processComm is the process-level group of training.nnodes > 1: MPI, which this binary was
// built without.
func processComm(nnodes int) (collective.Comm, error) {
	if nnodes > 1 {
		return nil, fmt.Errorf("config: training.nnodes is %d: several processes need a binary built with -tags mpi (go build -tags mpi -o trainer ./examples/trainer) started by mpirun -np %d", nnodes, nnodes)
	}
	return nil, nil
}

// finishProcess has nothing to end without MPI.
func finishProcess(failed bool) {}
