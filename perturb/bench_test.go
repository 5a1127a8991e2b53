package perturb

import (
	"math/rand/v2"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

func BenchmarkBlackenPatches(b *testing.B) {
	b.Run("cpu/image=448x448x3/patch=14", func(b *testing.B) {
		img := randImage(rand.New(rand.NewPCG(1, 1)), 448, 448, 3)
		dst := like(img)
		bl := DefaultBlackening()
		b.SetBytes(2 * 448 * 448 * 3)
		var id uint64
		for b.Loop() {
			id++
			if err := bl.Apply(dst, img, 1, id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cpu/image=32x448x448x3/patch=14", func(b *testing.B) {
		img := randImage(rand.New(rand.NewPCG(1, 1)), 32, 448, 448, 3)
		dst := like(img)
		ids := make([]uint64, 32)
		for i := range ids {
			ids[i] = uint64(i)
		}
		bl := DefaultBlackening()
		b.SetBytes(2 * 32 * 448 * 448 * 3)
		for b.Loop() {
			if err := bl.ApplyBatch(dst, img, 1, ids); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGaussianNoise(b *testing.B) {
	b.Run("cpu/image=448x448x3", func(b *testing.B) {
		img := randImage(rand.New(rand.NewPCG(1, 1)), 448, 448, 3)
		dst := like(img)
		b.SetBytes(2 * 448 * 448 * 3)
		for b.Loop() {
			if err := DefaultNoise().Apply(dst, img, 1, 2); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGaussianBlur(b *testing.B) {
	b.Run("cpu/image=448x448x3/radius=2", func(b *testing.B) {
		img := randImage(rand.New(rand.NewPCG(1, 1)), 448, 448, 3)
		dst := tensor.Must(tensor.NewLike(img, tensor.Uint8))
		b.SetBytes(2 * 448 * 448 * 3)
		for b.Loop() {
			if err := (Blur{Radius: 2}).Apply(dst, img, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
