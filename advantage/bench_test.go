package advantage

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// benchTokens runs fn under b.Loop and reports bytes per op and tokens/s.
func benchTokens(b *testing.B, tokens int, bytes int64, fn func() error) {
	b.SetBytes(bytes)
	b.ResetTimer()
	for b.Loop() {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func benchInputs(b *testing.B, rows, cols, group int) (r, v, m, base, ids, adv, ret *tensor.Tensor) {
	x := randBatch(newRand(9), rows, cols, group)
	r, v, m, base, ids = x.tensors(b)
	return r, v, m, base, ids, zeros(b, rows, cols), zeros(b, rows, cols)
}

// Token-level estimators on [64, 1024]: read rewards (+values for GAE) and mask, write adv and
// returns.
func BenchmarkGAE(b *testing.B) {
	for _, sh := range [][2]int{{64, 1024}, {512, 2048}} {
		b.Run(fmt.Sprintf("cpu/shape=%dx%d", sh[0], sh[1]), func(b *testing.B) {
			r, v, m, _, _, adv, ret := benchInputs(b, sh[0], sh[1], 1)
			n := sh[0] * sh[1]
			benchTokens(b, n, int64(n)*4*5, func() error { return gae(adv, ret, r, v, m, 0.99, 0.95) })
		})
	}
}

func BenchmarkReinforcePlusPlus(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		r, _, m, _, _, adv, ret := benchInputs(b, 64, 1024, 1)
		n := 64 * 1024
		benchTokens(b, n, int64(n)*4*4, func() error { return reinforcePlusPlus(adv, ret, r, m, 0.99) })
	})
}

func BenchmarkReMax(b *testing.B) {
	b.Run("cpu/shape=64x1024", func(b *testing.B) {
		r, _, m, base, _, adv, ret := benchInputs(b, 64, 1024, 1)
		n := 64 * 1024
		benchTokens(b, n, int64(n)*4*4+64*4, func() error { return reMax(adv, ret, r, m, base) })
	})
}

// Group estimators on 512 responses of 1024 tokens in groups of 8: read rewards, mask and ids,
// write adv and returns.
func benchGroup(b *testing.B, fn func(adv, ret, r, m, ids *tensor.Tensor) error) {
	const rows, cols, group = 512, 1024, 8
	b.Run(fmt.Sprintf("cpu/responses=%d/group=%d", rows, group), func(b *testing.B) {
		r, _, m, _, ids, adv, ret := benchInputs(b, rows, cols, group)
		n := rows * cols
		benchTokens(b, n, int64(n)*4*4+rows*4, func() error { return fn(adv, ret, r, m, ids) })
	})
}

func BenchmarkGRPO(b *testing.B) {
	benchGroup(b, func(a, rt, r, m, ids *tensor.Tensor) error { return grpo(a, rt, r, m, ids, GRPOOptions{}) })
}

func BenchmarkGRPOPassK(b *testing.B) {
	benchGroup(b, func(a, rt, r, m, ids *tensor.Tensor) error { return grpoPassK(a, rt, r, m, ids, GRPOOptions{}) })
}

func BenchmarkRLOO(b *testing.B) {
	benchGroup(b, func(a, rt, r, m, ids *tensor.Tensor) error { return rloo(a, rt, r, m, ids) })
}
