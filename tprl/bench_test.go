package tprl

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func benchInputs(b *testing.B, rows, cols int) (vals, old, aug, mask []float32) {
	r := rand.New(rand.NewPCG(1, 1))
	vals = randValues(r, rows*cols, false)
	old, aug = randLogProbs(r, rows*cols), randLogProbs(r, rows*cols)
	mask = make([]float32, rows*cols)
	for i := range rows {
		n := cols/2 + r.IntN(cols/2+1) // ragged, at least half full
		for t := range n {
			mask[i*cols+t] = 1
		}
	}
	return
}

func reportTokens(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkEntropyMask(b *testing.B) {
	for _, sh := range [][2]int{{64, 1024}, {512, 2048}} {
		rows, cols := sh[0], sh[1]
		vals, _, _, mask := benchInputs(b, rows, cols)
		v, m := f32(b, vals, rows, cols), f32(b, mask, rows, cols)
		dst := zeros(b, rows, cols)
		b.Run(fmt.Sprintf("cpu/shape=%dx%d", rows, cols), func(b *testing.B) {
			b.SetBytes(int64(rows*cols*12 + rows*4))
			for b.Loop() {
				if _, err := EntropyMask(dst, v, m, 0.2); err != nil {
					b.Fatal(err)
				}
			}
			reportTokens(b, rows*cols)
		})
	}
}

func BenchmarkPerceptionMask(b *testing.B) {
	rows, cols := 64, 1024
	_, old, aug, mask := benchInputs(b, rows, cols)
	o, a, m := f32(b, old, rows, cols), f32(b, aug, rows, cols), f32(b, mask, rows, cols)
	score, dst := zeros(b, rows, cols), zeros(b, rows, cols)
	b.Run(fmt.Sprintf("cpu/shape=%dx%d", rows, cols), func(b *testing.B) {
		b.SetBytes(int64(rows*cols*20 + rows*4))
		for b.Loop() {
			if _, err := percMask(score, dst, o, a, m, 0.2); err != nil {
				b.Fatal(err)
			}
		}
		reportTokens(b, rows*cols)
	})
}

func BenchmarkUnionMask(b *testing.B) {
	rows, cols := 64, 1024
	vals, old, aug, mask := benchInputs(b, rows, cols)
	v, m := f32(b, vals, rows, cols), f32(b, mask, rows, cols)
	em, pm, ltm := zeros(b, rows, cols), zeros(b, rows, cols), zeros(b, rows, cols)
	score := zeros(b, rows, cols)
	if _, err := EntropyMask(em, v, m, 0.2); err != nil {
		b.Fatal(err)
	}
	if _, err := percMask(score, pm, f32(b, old, rows, cols), f32(b, aug, rows, cols), m, 0.2); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("cpu/shape=%dx%d", rows, cols), func(b *testing.B) {
		b.SetBytes(int64(rows * cols * 24))
		for b.Loop() {
			if _, err := UnionMask(ltm, UnionInputs{EntropyMask: em, PerceptionMask: pm, Entropy: v, PerceptionScore: score, ResponseMask: m}); err != nil {
				b.Fatal(err)
			}
		}
		reportTokens(b, rows*cols)
	})
}

func BenchmarkShapeBatch(b *testing.B) {
	rows, cols := 512, 1024
	_, old, aug, mask := benchInputs(b, rows, cols)
	score := zeros(b, rows, cols)
	// perception score as the trainer would compute it
	if _, err := percMask(score, zeros(b, rows, cols), f32(b, old, rows, cols), f32(b, aug, rows, cols), f32(b, mask, rows, cols), 1); err != nil {
		b.Fatal(err)
	}
	adv := f32(b, old, rows, cols)
	m := f32(b, mask, rows, cols)
	shaped, factors, sens := zeros(b, rows, cols), zeros(b, rows), zeros(b, rows)
	for _, scope := range []ShapingScope{GlobalScope, PerMicroBatchScope} {
		b.Run(fmt.Sprintf("cpu/scope=%s/shape=%dx%d", scope, rows, cols), func(b *testing.B) {
			b.SetBytes(int64(rows * cols * 16))
			opt := ShapingOptions{ScalingMin: 0.8, Scope: scope, MiniBatchSize: 128, MicroBatchSize: 16}
			for b.Loop() {
				if _, err := ShapeBatch(ShapingOutputs{Advantages: shaped, Factors: factors, Sensitivity: sens}, ShapingInputs{Advantages: adv, PerceptionScore: score, ResponseMask: m}, opt); err != nil {
					b.Fatal(err)
				}
			}
			reportTokens(b, rows*cols)
		})
	}
}
