package tensor

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/cputime"
	"github.com/mtrl-go/mtrl/internal/dispatch"
)

// TestActivationAsmUpToDate fails when activation_amd64.s or its stubs differ from what
// internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestActivationAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "activation", "tensor") }

// actNames names actAll's outputs.
var actNames = []string{"silu", "quickgelu", "silu'", "quickgelu'", "swiglu", "swiglu dgate", "swiglu dup",
	"gelu", "gelu'", "gelu_tanh", "gelu_tanh'"}

// actAll runs the activation loops on x (split into gate, up and dy by rotation) with the
// implementation selected now: float32, or bfloat16 (x rounded to it; the outputs widened).
func actAll(x []float32, bf16 bool) [][]float32 {
	n := len(x)
	if bf16 {
		return actAllBF16(x)
	}
	up, dy := append(x[n/3:], x[:n/3]...), append(x[2*n/3:], x[:2*n/3]...)
	out := make([][]float32, len(actNames))
	for i := range out {
		out[i] = make([]float32, n+1) // one past the end must stay 0
	}
	activateCPU(SiLU, x, out[0][:n])
	activateCPU(QuickGELU, x, out[1][:n])
	activateBackwardCPU(SiLU, x, dy, out[2][:n])
	activateBackwardCPU(QuickGELU, x, dy, out[3][:n])
	swiGLUCPU(x, up, out[4][:n])
	swiGLUBackwardCPU(x, up, dy, out[5][:n], out[6][:n])
	activateCPU(GELU, x, out[7][:n])
	activateBackwardCPU(GELU, x, dy, out[8][:n])
	activateCPU(GELUTanh, x, out[9][:n])
	activateBackwardCPU(GELUTanh, x, dy, out[10][:n])
	return out
}

// actAllBF16 is actAll on bfloat16 through the bfloat16 entry points (the Go loops' run is
// the blocked float32 path: widen, float32 loop, round), in place where an op allows it.
func actAllBF16(x []float32) [][]float32 {
	n := len(x)
	b := make([]BF16, n)
	for i, v := range x {
		b[i] = BF16FromFloat32(v)
	}
	up, dy := append(b[n/3:], b[:n/3]...), append(b[2*n/3:], b[:2*n/3]...)
	bt := func(v []BF16) *Tensor { return Must(FromBF16(v, len(v))) }
	outs := make([][]BF16, len(actNames))
	for i := range outs {
		outs[i] = make([]BF16, n)
	}
	copy(outs[0], b)
	copy(outs[1], b)
	copy(outs[2], dy)
	copy(outs[3], dy)
	copy(outs[7], b)
	copy(outs[8], dy)
	for _, err := range []error{
		Activate(bt(outs[0]), bt(outs[0]), SiLU),
		Activate(bt(outs[1]), bt(outs[1]), QuickGELU),
		ActivateBackward(bt(outs[2]), ActivationGrad{X: bt(b), DY: bt(outs[2]), Activation: SiLU}),
		ActivateBackward(bt(outs[3]), ActivationGrad{X: bt(b), DY: bt(outs[3]), Activation: QuickGELU}),
		SwiGLU(bt(outs[4]), bt(b), bt(up)),
		SwiGLUBackward(bt(outs[5]), bt(outs[6]), SwiGLUGrad{Gate: bt(b), Up: bt(up), DY: bt(dy)}),
		Activate(bt(outs[7]), bt(outs[7]), GELU),
		ActivateBackward(bt(outs[8]), ActivationGrad{X: bt(b), DY: bt(outs[8]), Activation: GELU}),
		Activate(bt(outs[9]), bt(b), GELUTanh),
		ActivateBackward(bt(outs[10]), ActivationGrad{X: bt(b), DY: bt(dy), Activation: GELUTanh}),
	} {
		if err != nil {
			panic(err)
		}
	}
	out := make([][]float32, len(actNames))
	for j := range out {
		out[j] = make([]float32, n+1)
		for i, v := range outs[j] {
			out[j][i] = v.Float32()
		}
	}
	return out
}

// checkActSame fails unless every vector implementation gives the Go loops' bits on x. A NaN
// only has to be a NaN: which operand's sign and payload a two-NaN multiply keeps depends on
// the operand order the Go compiler picks.
func checkActSame(t *testing.T, x []float32) {
	t.Helper()
	for _, bf16 := range []bool{false, true} {
		checkActSameDType(t, x, bf16)
	}
}

func checkActSameDType(t *testing.T, x []float32, bf16 bool) {
	t.Helper()
	restore := actImpls.Use(dispatch.GoName)
	want := actAll(x, bf16)
	restore()
	names := actNames
	for _, im := range actImpls.Impls() {
		if im.Name == dispatch.GoName {
			continue
		}
		restore := actImpls.Use(im.Name)
		got := actAll(x, bf16)
		restore()
		for j := range want {
			for i, w := range want[j] {
				if g := got[j][i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					if i == len(x) {
						t.Fatalf("%s %s wrote past n = %d", im.Name, names[j], len(x))
					}
					t.Fatalf("%s %s(%v = %#08x) = %v (%#08x), want %v (%#08x), n = %d, bfloat16 %v", im.Name, names[j],
						x[i], math.Float32bits(x[i]), g, math.Float32bits(g), w, math.Float32bits(w), len(x), bf16)
				}
			}
		}
	}
}

// TestActivationSIMD: the vector SiLU, QuickGELU, GELU, GELUTanh, SwiGLU and their backwards
// equal the Go loops bit for bit, in float32 and (their own kernels, run in place where the op
// allows, so the Go fix-up must read the inputs as they were) in bfloat16 —
// on random bit patterns (NaNs, infinities, subnormals, huge values), on values
// where exp over- and underflows (|x| near 87–89 and 51–53 for β = 1.702, the Go fix-up),
// on a dense grid of [−20, 20], and at lengths around the lane counts (the Go tail).
// MTRL_ACT_SWEEP=N also checks every N-th float32 bit pattern (1: all of them, many minutes).
func TestActivationSIMD(t *testing.T) {
	if len(actImpls.Impls()) < 2 {
		t.Skip("no vector activations on this build or CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x7f800001), 1e-45, -1e-45, 88, -88, 88.5, -88.5,
		-87.33654, 87.33654, -87.3365, 89, -89, 52, -52, -51.7, 51.7, math.MaxFloat32, -math.MaxFloat32}
	for _, n := range []int{1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200} {
		x := make([]float32, n)
		for i := range x {
			x[i] = special[(i+n)%len(special)]
		}
		checkActSame(t, x)
	}
	const m = 1 << 18
	x := make([]float32, m)
	for i := range x {
		x[i] = math.Float32frombits(r.Uint32())
	}
	checkActSame(t, x)
	for i := range x {
		// 10.03: 2u of GELUTanh near ±88; 13.2: GELU's exps underflow
		c := []float64{88, 52.3, 87.3, 51.3, 10.03, 13.2}[i%6]
		x[i] = float32(math.Copysign(c+r.Float64()*1.5-0.5, r.Float64()-0.5))
	}
	checkActSame(t, x)
	for i := range x {
		x[i] = float32(-20 + 40*float64(i)/m)
	}
	checkActSame(t, x)
	if stride, _ := strconv.Atoi(os.Getenv("MTRL_ACT_SWEEP")); stride > 0 {
		const block = 1 << 22
		x := make([]float32, 0, block)
		for b := uint64(0); b < 1<<32; b += uint64(stride) {
			x = append(x, math.Float32frombits(uint32(b)))
			if len(x) == block {
				checkActSame(t, x)
				x = x[:0]
			}
		}
		checkActSame(t, x)
	}
}

// BenchmarkActivationImpls times the activations on every implementation of this CPU
// (the Go loops, AVX2, AVX-512), in float32 and with bfloat16 activations, at 256 tokens of
// 0.5B's MLP width (4864): per round (-benchtime=Nx: N rounds) 3 calls of each implementation
// in turn, each timed in process CPU time; it reports the medians over the rounds of the CPU
// nanoseconds per element and of the Go loops' time over the best kernel's.
func BenchmarkActivationImpls(b *testing.B) {
	const t, ff = 256, 4864
	mk := func(dt DType) *Tensor {
		xs := make([]float32, t*ff)
		for i := range xs {
			xs[i] = float32(i%97)/10 - 4.8
		}
		x := Must(FromFloat32(xs, t, ff))
		if dt == Float32 {
			return x
		}
		y := make([]BF16, len(xs))
		for i, f := range xs {
			y[i] = BF16FromFloat32(f)
		}
		return Must(FromBF16(y, t, ff))
	}
	for _, dt := range []DType{Float32, BFloat16} {
		for _, c := range []struct {
			name string
			mkOp func() func() error
		}{
			{"SiLU", func() func() error {
				x, y := mk(dt), mk(dt)
				return func() error { return Activate(y, x, SiLU) }
			}},
			{"QuickGELU", func() func() error {
				x, y := mk(dt), mk(dt)
				return func() error { return Activate(y, x, QuickGELU) }
			}},
			{"SiLUBackward", func() func() error {
				dx, in := mk(dt), ActivationGrad{X: mk(dt), DY: mk(dt), Activation: SiLU}
				return func() error { return ActivateBackward(dx, in) }
			}},
			{"GELU", func() func() error {
				x, y := mk(dt), mk(dt)
				return func() error { return Activate(y, x, GELU) }
			}},
			{"GELUBackward", func() func() error {
				dx, in := mk(dt), ActivationGrad{X: mk(dt), DY: mk(dt), Activation: GELU}
				return func() error { return ActivateBackward(dx, in) }
			}},
			{"GELUTanh", func() func() error {
				x, y := mk(dt), mk(dt)
				return func() error { return Activate(y, x, GELUTanh) }
			}},
			{"GELUTanhBackward", func() func() error {
				dx, in := mk(dt), ActivationGrad{X: mk(dt), DY: mk(dt), Activation: GELUTanh}
				return func() error { return ActivateBackward(dx, in) }
			}},
			{"SwiGLU", func() func() error {
				g, u, y := mk(dt), mk(dt), mk(dt)
				return func() error { return SwiGLU(y, g, u) }
			}},
			{"SwiGLUBackward", func() func() error {
				dg, du, in := mk(dt), mk(dt), SwiGLUGrad{Gate: mk(dt), Up: mk(dt), DY: mk(dt)}
				return func() error { return SwiGLUBackward(dg, du, in) }
			}},
		} {
			b.Run(c.name+"/"+dt.String(), func(b *testing.B) {
				op := c.mkOp()
				impls := actImpls.Impls()
				per := make([][]float64, len(impls))
				var ratio []float64
				for b.Loop() {
					ns := make([]float64, len(impls))
					for k, im := range impls {
						restore := actImpls.Use(im.Name)
						c0, _ := cputime.Process()
						for range 3 {
							if err := op(); err != nil {
								b.Fatal(err)
							}
						}
						c1, _ := cputime.Process()
						restore()
						ns[k] = float64((c1 - c0).Nanoseconds()) / (3 * t * ff)
						per[k] = append(per[k], ns[k])
					}
					ratio = append(ratio, ns[len(ns)-1]/ns[0])
				}
				for k, im := range impls {
					b.ReportMetric(medianOf(per[k]), im.Name+"-cpu-ns/elem")
				}
				b.ReportMetric(medianOf(ratio), "go/best")
			})
		}
	}
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
