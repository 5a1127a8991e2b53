package tensortest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// RunBenchmarks runs every benchmark of the suite on backend b.
func RunBenchmarks(b *testing.B, backend tensor.Backend) {
	b.Run("LogProbEntropy", func(b *testing.B) { BenchLogProbEntropy(b, backend) })
	b.Run("LogProbEntropyBackward", func(b *testing.B) { BenchLogProbEntropyBackward(b, backend) })
	b.Run("MaskedWhiten", func(b *testing.B) { BenchMaskedWhiten(b, backend) })
	b.Run("TopPMask", func(b *testing.B) { BenchTopPMask(b, backend) })
}

// LogitShapes are the CPU benchmark shapes of the logits (docs/conventions.md#benchmark-shapes);
// GPU backends pass larger.
var LogitShapes = [][2]int{{256, 151936}, {512, 32000}}

func benchLogits(b *testing.B, backend tensor.Backend, n, v int, dt tensor.DType) (*tensor.Tensor, *tensor.Tensor) {
	r := rand.New(rand.NewPCG(1, 1))
	var h *tensor.Tensor
	if dt == tensor.BFloat16 {
		d := make([]tensor.BF16, n*v)
		for i := range d {
			d[i] = tensor.BF16FromFloat32(float32(r.NormFloat64() * 3))
		}
		h = tensor.Must(tensor.FromBF16(d, n, v))
	} else {
		h = tensor.Must(tensor.FromFloat32(randF32(r, n*v, 3), n, v))
	}
	ys := make([]int32, n)
	for i := range ys {
		ys[i] = int32(r.IntN(v))
	}
	return onBackend(b, backend, h), onBackend(b, backend, tensor.Must(tensor.FromInt32(ys, n)))
}

// BenchLogProbEntropy times the fused forward on LogitShapes in float32 and bfloat16. Bytes are
// the logits read; tokens/s counts rows.
func BenchLogProbEntropy(b *testing.B, backend tensor.Backend, shapes ...[2]int) {
	if len(shapes) == 0 {
		shapes = LogitShapes
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, s := range shapes {
			n, v := s[0], s[1]
			b.Run(fmt.Sprintf("%s/dtype=%v/shape=%dx%d", backend.Name(), dt, n, v), func(b *testing.B) {
				logits, ys := benchLogits(b, backend, n, v, dt)
				lp, ent := newF32(b, backend, n), newF32(b, backend, n)
				b.SetBytes(int64(n * v * dt.Size()))
				for b.Loop() {
					if err := tensor.LogProbEntropy(lp, ent, logits, ys, 1); err != nil {
						b.Fatal(err)
					}
					if err := backend.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchLogProbEntropyBackward times the backward (read logits, write dlogits).
func BenchLogProbEntropyBackward(b *testing.B, backend tensor.Backend, shapes ...[2]int) {
	if len(shapes) == 0 {
		shapes = LogitShapes
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, s := range shapes {
			n, v := s[0], s[1]
			b.Run(fmt.Sprintf("%s/dtype=%v/shape=%dx%d", backend.Name(), dt, n, v), func(b *testing.B) {
				logits, ys := benchLogits(b, backend, n, v, dt)
				lp, ent := newF32(b, backend, n), newF32(b, backend, n)
				if err := tensor.LogProbEntropy(lp, ent, logits, ys, 1); err != nil {
					b.Fatal(err)
				}
				ones := onBackend(b, backend, tensor.Must(tensor.FromFloat32(randF32(rand.New(rand.NewPCG(2, 2)), n, 1), n)))
				dl, err := tensor.New(backend, dt, n, v)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(2 * n * v * dt.Size()))
				for b.Loop() {
					if err := tensor.LogProbEntropyBackward(dl, tensor.LogProbGrad{
						Logits: logits, Targets: ys, LogProbs: lp, Entropy: ent, DLogProbs: ones,
						DEntropy: ones, Temperature: 1,
					}); err != nil {
						b.Fatal(err)
					}
					if err := backend.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// TokenShapes are the per-token benchmark shapes ([B, T]).
var TokenShapes = [][2]int{{64, 1024}}

// BenchMaskedWhiten times whitening of [B, T] values.
func BenchMaskedWhiten(b *testing.B, backend tensor.Backend, shapes ...[2]int) {
	if len(shapes) == 0 {
		shapes = TokenShapes
	}
	for _, s := range shapes {
		b.Run(fmt.Sprintf("%s/shape=%dx%d", backend.Name(), s[0], s[1]), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 3))
			n := s[0] * s[1]
			v := onBackend(b, backend, tensor.Must(tensor.FromFloat32(randF32(r, n, 1), s[0], s[1])))
			m := onBackend(b, backend, tensor.Must(tensor.FromFloat32(randMask(r, n, 0.8), s[0], s[1])))
			dst := newF32(b, backend, s[0], s[1])
			b.SetBytes(int64(3 * 4 * n))
			for b.Loop() {
				if err := tensor.MaskedWhiten(dst, v, m); err != nil {
					b.Fatal(err)
				}
				if err := backend.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchTopPMask times per-row top-p selection with p = 0.4.
func BenchTopPMask(b *testing.B, backend tensor.Backend, shapes ...[2]int) {
	if len(shapes) == 0 {
		shapes = TokenShapes
	}
	for _, s := range shapes {
		b.Run(fmt.Sprintf("%s/shape=%dx%d", backend.Name(), s[0], s[1]), func(b *testing.B) {
			r := rand.New(rand.NewPCG(4, 4))
			n := s[0] * s[1]
			sc := onBackend(b, backend, tensor.Must(tensor.FromFloat32(randF32(r, n, 1), s[0], s[1])))
			m := onBackend(b, backend, tensor.Must(tensor.FromFloat32(randMask(r, n, 0.8), s[0], s[1])))
			dst := newF32(b, backend, s[0], s[1])
			b.SetBytes(int64(3 * 4 * n))
			for b.Loop() {
				if err := tensor.TopPMask(dst, sc, m, 0.4); err != nil {
					b.Fatal(err)
				}
				if err := backend.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
