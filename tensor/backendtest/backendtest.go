// Package backendtest cross-checks a tensor.Backend against the CPU backend's pure-Go reference
// kernels: the machinery every family's conformance suite uses (Config, Op, CrossCheck and the
// upload/download helpers) and package tensor's own op families, the fused log-probs (LogProb)
// and the masked statistics and top-p mask (Stats). The suites of the packages built on tensor
// live next to them, as gonum's testblas does: divergence/divergencetest, ppo/ppotest,
// advantage/advantagetest, tprl/tprltest and perturb/perturbtest. Package conformance runs all
// of them in one line:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, mybackend, backendtest.Config{}) }
//
// Each op runs on random inputs (fixed seeds) at several shapes, on the backend and on the CPU
// backend's pure-Go reference kernels (internal/dispatch.ForceGo: the CPU backend's SIMD
// kernels differ from those in the last bits), and twice on the backend, whose two results
// must be bitwise equal. The outputs must agree within each op's tolerance, or exactly with
// Config.Bitwise.
package backendtest

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/dispatch"
	"github.com/mtrl-go/mtrl/tensor"
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

// Stats cross-checks the masked statistics and the top-p mask of package tensor.
func Stats(t *testing.T, b tensor.Backend, cfg Config) { CrossCheck(t, b, cfg, statsOps) }

// Op is one op of a family on fixed inputs: Run computes its outputs on a backend and returns
// them on the host.
type Op struct {
	Name string
	// RTol and ATol bound the difference from the reference; Libm marks ops whose reference
	// calls exp, which stay within tolerance even with Config.Bitwise.
	RTol, ATol float64
	Libm       bool
	Run        func(t *testing.T, be tensor.Backend) [][]float32
}

// CrossCheck runs the ops family(rows, cols) at every shape of cfg on the CPU reference and
// twice on b, which must not be the CPU backend (it is the reference; its SIMD kernels are
// checked by their own packages). b's outputs must agree with the reference within each op's
// tolerance (exactly with cfg.Bitwise unless the op is Libm) and the two runs bit for bit.
func CrossCheck(t *testing.T, b tensor.Backend, cfg Config, family func(rows, cols int) []Op) {
	if b == tensor.CPU() {
		t.Fatal("backendtest: the CPU backend is the reference; run the suite on another backend")
	}
	defer dispatch.ForceGo()()
	for _, s := range cfg.shapes() {
		for _, o := range family(s[0], s[1]) {
			t.Run(fmt.Sprintf("%s/shape=%dx%d", o.Name, s[0], s[1]), func(t *testing.T) {
				want := o.Run(t, tensor.CPU())
				got := o.Run(t, b)
				again := o.Run(t, b)
				rtol, atol := o.RTol, o.ATol
				if cfg.Bitwise && !o.Libm {
					rtol, atol = 0, 0
				}
				for i := range want {
					near(t, o.Name, got[i], want[i], rtol, atol)
					if !same(got[i], again[i]) {
						t.Errorf("%s output %d: two runs on %s differ", o.Name, i, b.Name())
					}
				}
			})
		}
	}
}
