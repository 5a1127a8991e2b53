package divergence

import (
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

func BenchmarkLowVarKL(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		dst, lp, ref := benchInputs(b, 64, 1024)
		b.SetBytes(3 * 4 * 64 * 1024)
		for b.Loop() {
			if err := Penalty(dst, lp, ref, LowVarKL); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*64*1024/b.Elapsed().Seconds(), "tokens/s")
	})
}

func BenchmarkLowVarKLGrad(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		dst, lp, ref := benchInputs(b, 64, 1024)
		b.SetBytes(3 * 4 * 64 * 1024)
		for b.Loop() {
			if err := PenaltyGrad(dst, lp, ref, LowVarKL); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*64*1024/b.Elapsed().Seconds(), "tokens/s")
	})
}

func BenchmarkPerceptionScore(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		dst, old, aug := benchInputs(b, 64, 1024)
		b.SetBytes(3 * 4 * 64 * 1024)
		for b.Loop() {
			if err := PerceptionScore(dst, old, aug); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*64*1024/b.Elapsed().Seconds(), "tokens/s")
	})
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
