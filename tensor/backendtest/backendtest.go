// Package backendtest is the conformance suite of every kernel family for a tensor.Backend: the
// tensor ops (package tensortest), the divergences, the masked statistics, the PPO losses, the
// advantage estimators, the TPRL selection and the image perturbations. A backend runs all of it
// in one line:
//
//	func TestConformance(t *testing.T) { backendtest.Run(t, mybackend, backendtest.Config{}) }
//
// Each op runs on random inputs (fixed seeds) at several shapes, on the backend and on the CPU
// backend's pure-Go reference kernels (internal/dispatch.ForceGo: the CPU backend's SIMD
// kernels differ from those in the last bits), and twice on the backend, whose two results
// must be bitwise equal. The outputs must agree within each op's tolerance, or exactly with
// Config.Bitwise.
//
// One file per op family, named as the family's package: divergence.go, stats.go, ppo.go,
// advantage.go, tprl.go, perturb.go, logprob.go.
package backendtest

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/tensortest"
)

// Config selects the strictness and the sizes of the suite.
type Config struct {
	// Bitwise requires the results of every op whose reference calls no exp of the C library
	// (all but the log-prob kernels, low_var_kl, the full KL and the perception score) to equal
	// the pure-Go reference bit for bit: float32 arithmetic in the reference's order without
	// fused multiply-adds, float64 sums. The CUDA backend meets it.
	Bitwise bool
	// Shapes are the [rows, cols] of the per-token ops; nil means [3, 33], [64, 1024] and
	// [512, 2048], plus [2048, 2048] without -short.
	Shapes [][2]int
	// LogitShapes are the [rows, vocabulary] of the log-prob ops; nil means [2, 151936] and
	// [64, 32000], plus [512, 151936] without -short.
	LogitShapes [][2]int
}

func (c Config) shapes() [][2]int {
	if c.Shapes != nil {
		return c.Shapes
	}
	s := [][2]int{{3, 33}, {64, 1024}, {512, 2048}}
	if !testing.Short() {
		s = append(s, [2]int{2048, 2048}) // 4M tokens
	}
	return s
}

func (c Config) logitShapes() [][2]int {
	if c.LogitShapes != nil {
		return c.LogitShapes
	}
	s := [][2]int{{2, 151936}, {64, 32000}}
	if !testing.Short() {
		s = append(s, [2]int{512, 151936})
	}
	return s
}

// Run runs tensortest.Run and every family's cross-check against backend b, which must not be
// the CPU backend (it is the reference; its SIMD kernels are checked by their own packages).
func Run(t *testing.T, b tensor.Backend, cfg Config) {
	t.Run("tensor", func(t *testing.T) { tensortest.Run(t, b) })
	t.Run("LogProb", func(t *testing.T) { LogProb(t, b, cfg) })
	for _, f := range []struct {
		name string
		run  func(*testing.T, tensor.Backend, Config)
	}{
		{"Divergence", Divergence}, {"Stats", Stats}, {"PPO", PPO},
		{"Advantage", Advantage}, {"TPRL", TPRL}, {"Perturb", Perturb},
	} {
		t.Run(f.name, func(t *testing.T) { f.run(t, b, cfg) })
	}
}

// Divergence, Stats, PPO, Advantage, TPRL and Perturb run one family's cross-checks.
func Divergence(t *testing.T, b tensor.Backend, cfg Config) { crossCheck(t, b, cfg, divergenceOps) }
func Stats(t *testing.T, b tensor.Backend, cfg Config)      { crossCheck(t, b, cfg, statsOps) }
func PPO(t *testing.T, b tensor.Backend, cfg Config)        { crossCheck(t, b, cfg, ppoOps) }
func Advantage(t *testing.T, b tensor.Backend, cfg Config)  { crossCheck(t, b, cfg, advantageOps) }
func TPRL(t *testing.T, b tensor.Backend, cfg Config)       { crossCheck(t, b, cfg, tprlOps) }
func Perturb(t *testing.T, b tensor.Backend, cfg Config)    { crossCheck(t, b, cfg, perturbOps) }

// op is one op of a family on fixed inputs: run computes its outputs on a backend and returns
// them on the host.
type op struct {
	name string
	// rtol and atol bound the difference from the reference; libm marks ops whose reference
	// calls exp, which stay within tolerance even with Config.Bitwise.
	rtol, atol float64
	libm       bool
	run        func(t *testing.T, be tensor.Backend) [][]float32
}

func crossCheck(t *testing.T, b tensor.Backend, cfg Config, family func(rows, cols int) []op) {
	if b == tensor.CPU() {
		t.Fatal("backendtest: the CPU backend is the reference; run the suite on another backend")
	}
	defer dispatch.ForceGo()()
	for _, s := range cfg.shapes() {
		for _, o := range family(s[0], s[1]) {
			t.Run(fmt.Sprintf("%s/shape=%dx%d", o.name, s[0], s[1]), func(t *testing.T) {
				want := o.run(t, tensor.CPU())
				got := o.run(t, b)
				again := o.run(t, b)
				rtol, atol := o.rtol, o.atol
				if cfg.Bitwise && !o.libm {
					rtol, atol = 0, 0
				}
				for i := range want {
					near(t, o.name, got[i], want[i], rtol, atol)
					if !same(got[i], again[i]) {
						t.Errorf("%s output %d: two runs on %s differ", o.name, i, b.Name())
					}
				}
			})
		}
	}
}
