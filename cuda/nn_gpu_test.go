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

// TestAttentionWideHeads runs the head-dimension-256 attention kernels (tile sizes halved),
// which nntest's small heads do not reach, against the CPU backend's reference: a causal,
// grouped-query, variable-length batch, forward with lse and backward, and a decode step.
func TestAttentionWideHeads(t *testing.T) {
	be := device(t)
	const tn, hq, hkv, d = 27, 4, 2, 160
	r := rand.New(rand.NewPCG(7, 8))
	qv, kv, vv, dov := randn(r, tn*hq*d, 1), randn(r, tn*hkv*d, 1), randn(r, tn*hkv*d, 1), randn(r, tn*hq*d, 1)
	cfg := tensor.DefaultAttentionConfig(d, true)
	run := func(b tensor.Backend) [][]float32 {
		cu := []int32{0, 9, 27}
		in := tensor.AttentionInputs{Q: up(t, b, qv, tn, hq, d), K: up(t, b, kv, tn, hkv, d), V: up(t, b, vv, tn, hkv, d),
			CuSeqlensQ: upI(t, b, cu, 3), CuSeqlensK: upI(t, b, cu, 3)}
		out, lse := tensor.Must(tensor.New(b, tensor.Float32, tn, hq, d)), tensor.Must(tensor.New(b, tensor.Float32, tn, hq))
		dq := tensor.Must(tensor.New(b, tensor.Float32, tn, hq, d))
		dk, dv := tensor.Must(tensor.New(b, tensor.Float32, tn, hkv, d)), tensor.Must(tensor.New(b, tensor.Float32, tn, hkv, d))
		if err := tensor.AttentionLSE(out, lse, in, cfg); err != nil {
			t.Fatal(err)
		}
		g := tensor.AttentionGrad{AttentionInputs: in, Out: out, LSE: lse, DOut: up(t, b, dov, tn, hq, d)}
		if err := tensor.AttentionBackward(dq, dk, dv, g, cfg); err != nil {
			t.Fatal(err)
		}
		// Decode: 3 new queries of each of two sequences over the first 5 and 9 rows of their
		// caches of 9.
		kc, vc := up(t, b, kv[:2*9*hkv*d], 2, 9, hkv, d), up(t, b, vv[:2*9*hkv*d], 2, 9, hkv, d)
		dout := tensor.Must(tensor.New(b, tensor.Float32, 2, 3, hq, d))
		di := tensor.DecodeInputs{Q: up(t, b, qv[:2*3*hq*d], 2, 3, hq, d), KCache: kc, VCache: vc, Lens: upI(t, b, []int32{5, 9}, 2)}
		if err := tensor.AttentionDecode(dout, di, cfg); err != nil {
			t.Fatal(err)
		}
		return [][]float32{host(t, out), host(t, lse), host(t, dq), host(t, dk), host(t, dv), host(t, dout)}
	}
	got, want := run(be), run(tensor.CPU())
	for i, name := range []string{"out", "lse", "dq", "dk", "dv", "decode out"} {
		for j, w := range want[i] {
			if g := got[i][j]; math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
				t.Fatalf("%s[%d] = %v on the device, %v on the CPU", name, j, g, w)
			}
		}
	}
}
