//go:build !cuda

package main

import (
	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
)

// useDevice fails: this binary was built without -tags cuda.
func useDevice(*vlm.Model, int) (actorDevice, error) { return nil, cuda.ErrNotCompiled }

// openCUDA fails: this binary was built without -tags cuda.
func openCUDA(int) (tensor.Backend, func() error, error) { return nil, nil, cuda.ErrNotCompiled }
