//go:build cuda

package cuda_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tensor/nntest"
)

// TestNNOps certifies the transformer op families (tensor/nntest) on the device: cuBLAS GEMMs,
// the kernels of nn.cu and attention.cu, against the float64 reference, each run twice for
// bitwise determinism.
func TestNNOps(t *testing.T) { nntest.Run(t, device(t)) }

// TestNormStatsKernel: the device's norms write their saved statistics themselves
// (tensor.NormStatsKernel), so RMSNormStats and LayerNormStats never take the host fallback,
// which would download x to find them; nntest.Run checks their values.
func TestNormStatsKernel(t *testing.T) {
	if _, ok := tensor.KernelOf[tensor.NormStatsKernel](device(t)); !ok {
		t.Fatal("the cuda backend does not implement tensor.NormStatsKernel")
	}
}

// TestAttentionWideHeads runs the head-dimension-256 attention kernels (tile sizes halved),
// which nntest's small heads do not reach, against the CPU backend: a causal, grouped-query,
// variable-length batch, forward with lse and backward, and a decode step, in float32 and
// bfloat16. Both backends compute in float32 (to within 1e-4·(1+|w|) of each other); in bfloat16
// each side then rounds its result once, |round(x) − x| <= 2⁻⁸·|x|, so the two may further differ
// by 2⁻⁸ of each side's magnitude (|x| <= 1.004·|w| + the float32 bound).
func TestAttentionWideHeads(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) { attentionWideHeads(t, dt) })
	}
}

func attentionWideHeads(t *testing.T, dt tensor.DType) {
	be := device(t)
	const tn, hq, hkv, d = 27, 4, 2, 160
	r := rand.New(rand.NewPCG(7, 8))
	qv, kv, vv, dov := randn(r, tn*hq*d, 1), randn(r, tn*hkv*d, 1), randn(r, tn*hkv*d, 1), randn(r, tn*hq*d, 1)
	cfg := tensor.DefaultAttentionConfig(d, true)
	// put uploads v as dt (rounded to bfloat16 on the host: both backends see the same values).
	put := func(b tensor.Backend, v []float32, shape ...int) *tensor.Tensor {
		if dt == tensor.Float32 {
			return up(t, b, v, shape...)
		}
		h := make([]tensor.BF16, len(v))
		for i, x := range v {
			h[i] = tensor.BF16FromFloat32(x)
		}
		return tensor.Must(tensor.To(b, tensor.Must(tensor.FromBF16(h, shape...))))
	}
	run := func(b tensor.Backend) [][]float32 {
		cu := []int32{0, 9, 27}
		in := tensor.AttentionInputs{Q: put(b, qv, tn, hq, d), K: put(b, kv, tn, hkv, d), V: put(b, vv, tn, hkv, d),
			CuSeqlensQ: upI(t, b, cu, 3), CuSeqlensK: upI(t, b, cu, 3)}
		out, lse := tensor.Must(tensor.New(b, dt, tn, hq, d)), tensor.Must(tensor.New(b, tensor.Float32, tn, hq))
		dq := tensor.Must(tensor.New(b, dt, tn, hq, d))
		dk, dv := tensor.Must(tensor.New(b, dt, tn, hkv, d)), tensor.Must(tensor.New(b, dt, tn, hkv, d))
		if err := tensor.AttentionLSE(out, lse, in, cfg); err != nil {
			t.Fatal(err)
		}
		g := tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: put(b, dov, tn, hq, d)}
		if err := tensor.AttentionBackward(dq, dk, dv, g, cfg); err != nil {
			t.Fatal(err)
		}
		// Decode: 3 new queries of each of two sequences over the first 5 and 9 rows of their
		// caches of 9.
		kc, vc := put(b, kv[:2*9*hkv*d], 2, 9, hkv, d), put(b, vv[:2*9*hkv*d], 2, 9, hkv, d)
		dout := tensor.Must(tensor.New(b, dt, 2, 3, hq, d))
		di := tensor.DecodeInputs{Q: put(b, qv[:2*3*hq*d], 2, 3, hq, d), KCache: kc, VCache: vc, Lens: upI(t, b, []int32{5, 9}, 2)}
		if err := tensor.AttentionDecode(dout, di, cfg); err != nil {
			t.Fatal(err)
		}
		return [][]float32{host(t, out), host(t, lse), host(t, dq), host(t, dk), host(t, dv), host(t, dout)}
	}
	got, want := run(be), run(tensor.CPU())
	for i, name := range []string{"out", "lse", "dq", "dk", "dv", "decode out"} {
		for j, w := range want[i] {
			w := float64(w)
			tol := 1e-4 * (1 + math.Abs(w))
			if dt == tensor.BFloat16 && name != "lse" {
				tol += 0x1p-8 * (2*1.004*math.Abs(w) + 2*tol)
			}
			if g := float64(got[i][j]); math.Abs(g-w) > tol {
				t.Fatalf("%s[%d] = %v on the device, %v on the CPU", name, j, g, w)
			}
		}
	}
}
