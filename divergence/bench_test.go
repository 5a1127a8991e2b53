package divergence

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func benchInputs(b *testing.B, rows, cols int) (dst, x, y *tensor.Tensor) {
	r := rand.New(rand.NewPCG(1, 1))
	n := rows * cols
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range n {
		xs[i] = float32(-4 * r.Float64())
		ys[i] = float32(-4 * r.Float64())
	}
	return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, rows, cols)),
		tensor.Must(tensor.FromFloat32(xs, rows, cols)), tensor.Must(tensor.FromFloat32(ys, rows, cols))
}

// benchElementwise runs fn as cpu/impl=<name>/shape=RxC for every implementation of the
// elementwise kernels (the SIMD ones and the pure-Go reference) on [64, 1024] and [512, 2048].
// bytes is the traffic per element (three float32 streams for the forward kernels).
func benchElementwise(b *testing.B, bytes int, fn func(dst, x, y *tensor.Tensor) error) {
	for _, name := range penaltyImpls.Names() {
		for _, sh := range [][2]int{{64, 1024}, {512, 2048}} {
			b.Run(fmt.Sprintf("cpu/impl=%s/shape=%dx%d", name, sh[0], sh[1]), func(b *testing.B) {
				defer penaltyImpls.Use(name)()
				dst, x, y := benchInputs(b, sh[0], sh[1])
				n := sh[0] * sh[1]
				b.SetBytes(int64(bytes * n))
				for b.Loop() {
					if err := fn(dst, x, y); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)*float64(n)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

func BenchmarkLowVarKL(b *testing.B) {
	benchElementwise(b, 12, func(dst, lp, ref *tensor.Tensor) error { return Penalty(dst, lp, ref, LowVarKL) })
}

// BenchmarkLowVarKLBackward reads d loss / d penalty as a fourth stream (16 bytes per token).
func BenchmarkLowVarKLBackward(b *testing.B) {
	var dpen *tensor.Tensor
	benchElementwise(b, 16, func(dst, lp, ref *tensor.Tensor) error {
		if dpen == nil || dpen.Len() != lp.Len() {
			dpen = tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, lp.Shape()...))
			d, _ := dpen.Float32s()
			for i := range d {
				d[i] = 0.5
			}
		}
		return PenaltyBackward(dst, PenaltyGrad{LogProbs: lp, Ref: ref, DPenalty: dpen, Kind: LowVarKL})
	})
}

func BenchmarkPerceptionScore(b *testing.B) {
	benchElementwise(b, 12, PerceptionScore)
}

func BenchmarkRewards(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		dst, lp, ref := benchInputs(b, 64, 1024)
		b.SetBytes(4 * 4 * 64 * 1024)
		for b.Loop() {
			if err := Rewards(dst, dst, lp, ref, 0.05); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*64*1024/b.Elapsed().Seconds(), "tokens/s")
	})
}
