//go:build cuda

package main

import (
	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/examples/internal/vlm"
)

// useDevice opens CUDA device ordinal and runs m's forward and backward there (vlm.Model.UseOps with
// the model's CUDA op set). It returns the function that gives the device back.
func useDevice(m *vlm.Model, ordinal int) (func() error, error) {
	b, err := cuda.New(ordinal)
	if err != nil {
		return nil, err
	}
	o, err := vlm.NewCUDAOps(m.Config, b)
	if err == nil {
		err = m.UseOps(o)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return func() error {
		_ = m.UseOps(nil)
		_ = o.Close()
		return b.Close()
	}, nil
}
