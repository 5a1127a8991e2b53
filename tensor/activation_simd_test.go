package tensor

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mtrl-go/mtrl/internal/asmcheck"
	"github.com/mtrl-go/mtrl/internal/dispatch"
)

// TestActivationAsmUpToDate fails when activation_amd64.s or its stubs differ from what
// internal/asmgen generates: edit the generator, then run go generate ./tensor.
func TestActivationAsmUpToDate(t *testing.T) { asmcheck.UpToDate(t, "activation", "tensor") }

// actAll runs the four sigmoid-family loops on x (split into gate, up and dy by rotation)
// with the implementation selected now.
func actAll(x []float32) [][]float32 {
	n := len(x)
	up, dy := append(x[n/3:], x[:n/3]...), append(x[2*n/3:], x[:2*n/3]...)
	out := make([][]float32, 7)
	for i := range out {
		out[i] = make([]float32, n+1) // one past the end must stay 0
	}
	activateCPU(SiLU, x, out[0][:n])
	activateCPU(QuickGELU, x, out[1][:n])
	activateBackwardCPU(SiLU, x, dy, out[2][:n])
	activateBackwardCPU(QuickGELU, x, dy, out[3][:n])
	swiGLUCPU(x, up, out[4][:n])
	swiGLUBackwardCPU(x, up, dy, out[5][:n], out[6][:n])
	return out
}

// checkActSame fails unless every vector implementation gives the Go loops' bits on x. A NaN
// only has to be a NaN: which operand's sign and payload a two-NaN multiply keeps depends on
// the operand order the Go compiler picks.
func checkActSame(t *testing.T, x []float32) {
	t.Helper()
	restore := actImpls.Use(dispatch.GoName)
	want := actAll(x)
	restore()
	names := []string{"silu", "quickgelu", "silu'", "quickgelu'", "swiglu", "swiglu dgate", "swiglu dup"}
	for _, im := range actImpls.Impls() {
		if im.Name == dispatch.GoName {
			continue
		}
		restore := actImpls.Use(im.Name)
		got := actAll(x)
		restore()
		for j := range want {
			for i, w := range want[j] {
				if g := got[j][i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					if i == len(x) {
						t.Fatalf("%s %s wrote past n = %d", im.Name, names[j], len(x))
					}
					t.Fatalf("%s %s(%v = %#08x) = %v (%#08x), want %v (%#08x), n = %d", im.Name, names[j],
						x[i], math.Float32bits(x[i]), g, math.Float32bits(g), w, math.Float32bits(w), len(x))
				}
			}
		}
	}
}

// TestActivationSIMD: the vector SiLU, QuickGELU, SwiGLU and their backwards equal the Go loops
// bit for bit — on random bit patterns (NaNs, infinities, subnormals, huge values), on values
// where exp over- and underflows (|x| near 87–89 and 51–53 for β = 1.702, the Go fix-up),
// on a dense grid of [−20, 20], and at lengths around the lane counts (the Go tail).
// MTRL_ACT_EXHAUSTIVE=1 also checks every float32 bit pattern (minutes).
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
		c := []float64{88, 52.3, 87.3, 51.3}[i%4]
		x[i] = float32(math.Copysign(c+r.Float64()*1.5-0.5, r.Float64()-0.5))
	}
	checkActSame(t, x)
	for i := range x {
		x[i] = float32(-20 + 40*float64(i)/m)
	}
	checkActSame(t, x)
	if os.Getenv("MTRL_ACT_EXHAUSTIVE") == "1" {
		const block = 1 << 22
		for b := uint64(0); b < 1<<32; b += block {
			x := make([]float32, block)
			for i := range x {
				x[i] = math.Float32frombits(uint32(b) + uint32(i))
			}
			checkActSame(t, x)
		}
	}
}
