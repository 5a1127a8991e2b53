//go:build !cuda

package main

import (
	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
)

// useDevice fails: this binary was built without -tags cuda.
func useDevice(*vlm.Model, int) (actorDevice, error) { return nil, cuda.ErrNotCompiled }
