//go:build cuda

package mtrl_test

// The golden runner on the CUDA backend (build tag cuda; GPU machines only, see package cuda).
// TestGoldenCUDA runs the cases of the ops that have device kernels with every input moved to
// the device (tensor.To) and the outputs copied back before comparison, so the device kernels
// are what the reference vectors check. MTRL_CUDA_DEVICE selects the device (default 0); a
// missing device skips visibly, or fails when MTRL_REQUIRE_CUDA=1.

import (
	"os"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/cuda"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/internal/golden"
	"github.com/mtrl-go/mtrl/tensor"
)

// cudaGolden returns handlers for the ops with CUDA kernels, running on backend be.
func cudaGolden(be tensor.Backend) map[string]goldenHandler {
	on := func(c *golden.Case, t *tensor.Tensor) *tensor.Tensor {
		d, err := tensor.To(be, t)
		if err != nil {
			c.T.Fatalf("copy to %s: %v", be.Name(), err)
		}
		return d
	}
	back := func(c *golden.Case, t *tensor.Tensor) *tensor.Tensor {
		h, err := tensor.To(tensor.CPU(), t)
		if err != nil {
			c.T.Fatalf("copy from %s: %v", be.Name(), err)
		}
		return h
	}
	return map[string]goldenHandler{
		"log_probs_entropy": func(c *golden.Case) error {
			logits, ys := on(c, c.F32("logits")), on(c, c.I32("responses"))
			lp := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			ent := tensor.Must(tensor.NewLike(ys, tensor.Float32))
			err := tensor.LogProbEntropy(lp, ent, logits, ys, float32(c.Float("temperature")))
			if err == nil {
				c.Check("log_probs", back(c, lp))
				c.Check("entropy", back(c, ent))
			}
			return err
		},
		"masked_mean": func(c *golden.Case) error {
			if c.Params["dim"] != nil {
				// Per-row means have no device kernel (tensor declares no interface); the
				// CPU runner covers them. Mark the output compared by running the host op.
				v, m := c.F32("values"), c.F32("mask")
				dst := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, v.Dim(0)))
				err := tensor.MaskedMeanRows(dst, v, m)
				c.Check("mean", dst)
				return err
			}
			got, err := tensor.MaskedMean(on(c, c.F32("values")), on(c, c.F32("mask")))
			c.Check("mean", got)
			return err
		},
		"compute_kl": func(c *golden.Case) error {
			kind, err := divergence.ParseKind(c.String("kl_penalty"))
			if err != nil {
				return err
			}
			lp, ref := on(c, c.F32("log_probs")), on(c, c.F32("ref_log_probs"))
			shape := lp.Shape()
			if kind == divergence.Full && len(shape) > 0 {
				shape = shape[:len(shape)-1]
			}
			dst := tensor.Must(tensor.New(be, tensor.Float32, shape...))
			err = divergence.Penalty(dst, lp, ref, kind)
			c.Check("kl", back(c, dst))
			return err
		},
		"compute_rewards": func(c *golden.Case) error {
			scores := on(c, c.F32("token_level_scores"))
			dst := tensor.Must(tensor.NewLike(scores, tensor.Float32))
			err := divergence.Rewards(dst, scores, on(c, c.F32("log_probs")), on(c, c.F32("ref_log_probs")), float32(c.Float("kl_ratio")))
			c.Check("rewards", back(c, dst))
			return err
		},
	}
}

func TestGoldenCUDA(t *testing.T) {
	n := 0
	if s := os.Getenv("MTRL_CUDA_DEVICE"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	be, err := cuda.New(n)
	if err != nil {
		if os.Getenv("MTRL_REQUIRE_CUDA") == "1" {
			t.Fatalf("MTRL_REQUIRE_CUDA=1 and cuda.New(%d): %v", n, err)
		}
		t.Skipf("SKIP: no CUDA device %d: %v", n, err)
	}
	defer be.Close()
	handlers := cudaGolden(be)
	ran := 0
	for _, dir := range goldenDirs(t) {
		files, err := golden.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			h, ok := handlers[f.Op]
			if !ok {
				continue // no device kernel: the CPU runner (TestGolden) covers it
			}
			ran++
			t.Run(f.Op, func(t *testing.T) {
				for _, c := range f.Cases {
					t.Run(c.Name, func(t *testing.T) { runGoldenCase(t, h, c) })
				}
			})
		}
	}
	if ran == 0 {
		t.Error("no golden file has an op with a CUDA handler")
	}
}
