//go:build cuda && nccl

package main

import (
	"context"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// haveNCCL: this binary reduces device tensors with NCCL.
const haveNCCL = true

// bootstrapNCCL creates this rank's NCCL communicator over comm's ranks (rank 0's id travels
// by comm).
func bootstrapNCCL(ctx context.Context, b *cuda.Backend, comm collective.Comm) (ncclComm, error) {
	return cuda.BootstrapNCCL(ctx, b, comm)
}
