//go:build !cuda

package main

import (
	"context"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/collective"
)

// haveNCCL: without -tags cuda there is no NCCL.
const haveNCCL = false

// useDevice fails: this binary was built without -tags cuda.
func useDevice(*vlm.Model, int) (actorDevice, error) { return nil, cuda.ErrNotCompiled }

// openCUDA fails: this binary was built without -tags cuda.
func openCUDA(int) (tensor.Backend, func() error, error) { return nil, nil, cuda.ErrNotCompiled }

// deviceCollectives are the host's tensor collectives over comm: without -tags cuda no
// parameter is on a device.
func deviceCollectives(_ context.Context, _ tensor.Backend, comm collective.Comm) (collective.Tensors, func() error, error) {
	h, err := collective.NewHostTensors(comm)
	return h, func() error { return nil }, err
}
