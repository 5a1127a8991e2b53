package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/internal/gemm"
	"github.com/mtrl-go/mtrl/internal/nnref"
	"github.com/mtrl-go/mtrl/internal/parallel"
)

// TestLMHeadBackwardBitIdentical checks that the one-pass backward (the logits recomputed once,
// Wᵀ packed one vocabulary chunk at a time, dw as one product per chunk) gives bit for bit the
// gradients of the two-pass backward it replaced, which recomputed the logits in a dh pass over
// row blocks (against the whole Wᵀ, packed once) and again in a dw pass over vocabulary chunks
// (128 rows per product). The math is the same: every logit is one GEMM sum whatever its tile,
// dh sums the chunks in ascending order either way, and dw's K blocks of gemm.KBlock rows are
// the old pass's row tiles. A frozen head (nil dweight) gives the same dhidden.
func TestLMHeadBackwardBitIdentical(t *testing.T) {
	if !gemm.SIMD() {
		t.Skip("SKIP: the CPU kernels need a vector GEMM")
	}
	if gemm.KBlock != 128 {
		t.Fatalf("gemm.KBlock is %d: the old dw pass's 128-row tiles no longer match its K blocks", gemm.KBlock)
	}
	r := rand.New(rand.NewPCG(41, 42))
	const n, d, v, temp = 157, 80, 2100, 0.7 // partial row blocks, panels and vocabulary chunks
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16=", bf16), func(t *testing.T) {
			randt := func(k int, s float64, shape ...int) *Tensor {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(r.NormFloat64() * s)
				}
				tt := Must(FromFloat32(x, shape...))
				if bf16 {
					b := make([]BF16, k)
					for i, f := range x {
						b[i] = BF16FromFloat32(f)
					}
					tt = Must(FromBF16(b, shape...))
				}
				return tt
			}
			hidden, weight := randt(n*d, 1, n, d), randt(v*d, 0.2, v, d)
			ys := make([]int32, n)
			for i := range ys {
				ys[i] = int32(r.IntN(v))
			}
			f32 := func(k int, shape ...int) *Tensor {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return Must(FromFloat32(x, shape...))
			}
			gl, ge, dw0 := f32(n, n), f32(n, n), f32(v*d, v, d)
			pw, err := PackWeight(weight)
			if err != nil {
				t.Fatal(err)
			}
			in := LMHeadInputs{Hidden: hidden, Weight: pw, Targets: Must(FromInt32(ys, n)), Temperature: temp}
			lp, ent := Must(New(CPU(), Float32, n)), Must(New(CPU(), Float32, n))
			if err := LMHeadLogProbs(lp, ent, in); err != nil {
				t.Fatal(err)
			}
			gin := LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl, DEntropy: ge, Accumulate: true}
			dh, dw := Must(New(CPU(), Float32, n, d)), Must(FromFloat32(append([]float32(nil), hostF32(dw0)...), v, d))
			if err := LMHeadBackward(dh, dw, gin); err != nil {
				t.Fatal(err)
			}
			dhFrozen := Must(New(CPU(), Float32, n, d))
			if err := LMHeadBackward(dhFrozen, nil, gin); err != nil {
				t.Fatal(err)
			}

			g := lmKernels(pw, d, hidden, weight, &lmBackward{dweight: true}).(*cpuLMKernels)
			wT := gemm.PackTF32(v, d, hostF32(weight))
			grad := nnref.LMHeadGrad[float32]{Targets: ys, LogP: hostF32(lp), Ent: hostF32(ent), DLogP: hostF32(gl), DEnt: hostF32(ge), Temp: temp}
			oldDH, oldDW := make([]float32, n*d), append([]float32(nil), hostF32(dw0)...)
			twoPassBackward(n, d, v, g, wT, grad, oldDH, oldDW)

			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"dhidden", hostF32(dh), oldDH}, {"dweight", hostF32(dw), oldDW}, {"dhidden (frozen head)", hostF32(dhFrozen), oldDH}} {
				for i := range c.want {
					if c.got[i] != c.want[i] {
						t.Fatalf("%s[%d] = %v, the two-pass backward's %v", c.name, i, c.got[i], c.want[i])
					}
				}
			}
		})
	}
}

// twoPassBackward is the backward as it was (accumulating into dw), on the same tile kernels.
func twoPassBackward(n, d, v int, g *cpuLMKernels, wT *gemm.Packed, gr nnref.LMHeadGrad[float32], dh, dw []float32) {
	lse := make([]float64, n)
	var zy [1]float32
	for i := range n {
		g.Logits(i, i+1, int(gr.Targets[i]), int(gr.Targets[i])+1, zy[:])
		lse[i] = float64(zy[0]/gr.Temp) - float64(gr.LogP[i])
	}
	tile := func(lo, hi, c0, vc int, z []float32) {
		g.Logits(lo, hi, c0, c0+vc, z)
		for j := range z[:(hi-lo)*vc] {
			z[j] /= gr.Temp
		}
		for r := range hi - lo {
			i := lo + r
			zr := z[r*vc : (r+1)*vc]
			g.GradRow(zr, zr, int(gr.Targets[i])-c0, lse[i], float64(gr.DLogP[i]), float64(gr.DEnt[i]), float64(gr.Ent[i]), gr.Temp)
		}
	}
	parallel.For(n, nnref.LMRowBlock, func(lo, hi int) {
		z := make([]float32, (hi-lo)*nnref.LMVocabChunk)
		for c0 := 0; c0 < v; c0 += nnref.LMVocabChunk {
			vc := min(v-c0, nnref.LMVocabChunk)
			tile(lo, hi, c0, vc, z)
			gemm.MulRange(hi-lo, z, vc, wT, 0, d, c0, c0+vc, dh[lo*d:], d, true)
		}
	})
	const rows = 128
	parallel.For(v, nnref.LMVocabChunk, func(c0, c1 int) {
		vc := c1 - c0
		z, zT := make([]float32, rows*vc), make([]float32, rows*vc)
		for lo := 0; lo < n; lo += rows {
			hi := min(lo+rows, n)
			tile(lo, hi, c0, vc, z)
			for r := range hi - lo {
				for j, x := range z[r*vc : (r+1)*vc] {
					zT[j*(hi-lo)+r] = x
				}
			}
			gemm.MulRange(vc, zT, hi-lo, g.hT, 0, d, lo, hi, dw[c0*d:], d, true)
		}
	})
}

// TestLMHeadBackwardGradBF16 checks LMHeadGrad.GradBF16 against float64 products of the logits
// gradient the same kernels compute, rounded to bfloat16: with bfloat16 hidden states and weight
// (the VDPBF16PS products where the CPU has them) every product is exact in float32, so the
// only error is the float32 additions — at most K terms plus one per K block (256) and per
// vocabulary chunk (1024), plus one for the accumulated dweight — each within 2⁻²⁴ of the
// running sum: |err| ≤ adds·2⁻²⁴·Σ|terms| (×1.01); with float32 inputs the products round too
// (2·adds). A frozen head's dhidden is the same bits.
func TestLMHeadBackwardGradBF16(t *testing.T) {
	if !gemm.SIMD() {
		t.Skip("SKIP: the CPU kernels need a vector GEMM")
	}
	r := rand.New(rand.NewPCG(43, 44))
	const n, d, v, temp = 157, 80, 2100, 0.7
	for _, bf16 := range []bool{false, true} {
		t.Run(fmt.Sprint("bf16=", bf16), func(t *testing.T) {
			randt := func(k int, s float64, shape ...int) *Tensor {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(r.NormFloat64() * s)
					if bf16 {
						x[i] = BF16FromFloat32(x[i]).Float32()
					}
				}
				if !bf16 {
					return Must(FromFloat32(x, shape...))
				}
				b := make([]BF16, k)
				for i, f := range x {
					b[i] = BF16FromFloat32(f)
				}
				return Must(FromBF16(b, shape...))
			}
			hidden, weight := randt(n*d, 1, n, d), randt(v*d, 0.2, v, d)
			ys := make([]int32, n)
			for i := range ys {
				ys[i] = int32(r.IntN(v))
			}
			f32 := func(k int, shape ...int) *Tensor {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return Must(FromFloat32(x, shape...))
			}
			gl, ge, dw0 := f32(n, n), f32(n, n), f32(v*d, v, d)
			pw, err := PackWeight(weight)
			if err != nil {
				t.Fatal(err)
			}
			in := LMHeadInputs{Hidden: hidden, Weight: pw, Targets: Must(FromInt32(ys, n)), Temperature: temp}
			lp, ent := Must(New(CPU(), Float32, n)), Must(New(CPU(), Float32, n))
			if err := LMHeadLogProbs(lp, ent, in); err != nil {
				t.Fatal(err)
			}
			gin := LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: gl, DEntropy: ge, Accumulate: true, GradBF16: true}
			dh, dw := Must(New(CPU(), Float32, n, d)), Must(FromFloat32(append([]float32(nil), hostF32(dw0)...), v, d))
			if err := LMHeadBackward(dh, dw, gin); err != nil {
				t.Fatal(err)
			}
			frozen := Must(New(CPU(), Float32, n, d))
			if err := LMHeadBackward(frozen, nil, gin); err != nil {
				t.Fatal(err)
			}

			// The logits gradient as the backward computes it, rounded to bfloat16.
			g := lmKernels(pw, d, hidden, weight, &lmBackward{dweight: true}).(*cpuLMKernels)
			lpv, entv, glv, gev := hostF32(lp), hostF32(ent), hostF32(gl), hostF32(ge)
			dz := make([]float32, n*v)
			var zy [1]float32
			for i := range n {
				g.Logits(i, i+1, int(ys[i]), int(ys[i])+1, zy[:])
				lse := float64(zy[0]/temp) - float64(lpv[i])
				z := dz[i*v : (i+1)*v]
				for c0 := 0; c0 < v; c0 += nnref.LMVocabChunk {
					c1 := min(v, c0+nnref.LMVocabChunk)
					g.Logits(i, i+1, c0, c1, z[c0:c1])
				}
				for j := range z {
					z[j] /= temp
				}
				g.GradRow(z, z, int(ys[i]), lse, float64(glv[i]), float64(gev[i]), float64(entv[i]), temp)
			}
			nnref.RoundBF16(dz)
			h, w, dhv, dwv, dw0v := hostF32(hidden), hostF32(weight), hostF32(dh), hostF32(dw), hostF32(dw0)
			factor := 1.0
			if !bf16 {
				factor = 2
			}
			check := func(name string, got float32, want, sum float64, k int) {
				t.Helper()
				adds := float64(k + (k+255)/256 + (k+1023)/1024 + 1)
				if e := math.Abs(float64(got) - want); !(e <= 1.01*factor*adds*0x1p-24*sum) {
					t.Fatalf("%s = %v, want %v (error %g, bound %g)", name, got, want, e, 1.01*factor*adds*0x1p-24*sum)
				}
			}
			for i := range n {
				for k := range d {
					var want, sum float64
					for j := range v {
						x := float64(dz[i*v+j]) * float64(w[j*d+k])
						want += x
						sum += math.Abs(x)
					}
					check(fmt.Sprintf("dhidden[%d,%d]", i, k), dhv[i*d+k], want, sum, v)
					if frozen := hostF32(frozen)[i*d+k]; frozen != dhv[i*d+k] {
						t.Fatalf("frozen head: dhidden[%d,%d] = %v, with dweight %v", i, k, frozen, dhv[i*d+k])
					}
				}
			}
			for j := range v {
				for k := range d {
					want, sum := float64(dw0v[j*d+k]), math.Abs(float64(dw0v[j*d+k]))
					for i := range n {
						x := float64(dz[i*v+j]) * float64(h[i*d+k])
						want += x
						sum += math.Abs(x)
					}
					check(fmt.Sprintf("dweight[%d,%d]", j, k), dwv[j*d+k], want, sum, n+1)
				}
			}
		})
	}
}
