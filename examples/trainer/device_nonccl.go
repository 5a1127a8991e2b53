//go:build cuda && !nccl

package main

import (
	"context"
	"errors"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// haveNCCL: this binary has no NCCL; a model_path run reduces device tensors through the host.
const haveNCCL = false

// bootstrapNCCL fails: the binary was built without -tags nccl.
func bootstrapNCCL(context.Context, *cuda.Backend, collective.Comm) (ncclComm, error) {
	return nil, errors.New("worker.actor.grad_reduce=bucketed on several CUDA ranks reduces with NCCL: build with -tags cuda,nccl (or use grad_reduce=ordered)")
}
