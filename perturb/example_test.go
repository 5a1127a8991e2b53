package perturb_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
)

func ExampleBlackenPatches() {
	// A 3×5 grayscale image in 2-pixel patches: a 2×3 grid, partial at the edges.
	img := tensor.Must(tensor.FromUint8([]uint8{
		1, 2, 3, 4, 5,
		6, 7, 8, 9, 10,
		11, 12, 13, 14, 15,
	}, 3, 5))
	// Replay the reference's uniform draws: patch i is black when draws[i] < 0.5.
	grid, err := perturb.PatchGrid(3, 5, 2, 0.5, []float64{0.9, 0.1, 0.7, 0.6, 0.8, 0.2})
	if err != nil {
		fmt.Println(err)
		return
	}
	out := tensor.Must(tensor.NewLike(img, tensor.Uint8))
	if err := perturb.BlackenPatches(out, img, grid, 2); err != nil {
		fmt.Println(err)
	}
	px, _ := out.Uint8s()
	for y := range 3 {
		fmt.Println(px[y*5 : y*5+5])
	}
	// Output:
	// [1 2 0 0 5]
	// [6 7 0 0 10]
	// [11 12 13 14 0]
}

func ExampleBlackening_ApplyBatch() {
	// Two 4×4 RGB images; each image's patches depend only on (seed, its sample id).
	batch := tensor.Must(tensor.FromUint8(make([]uint8, 2*4*4*3), 2, 4, 4, 3))
	px, _ := batch.Uint8s()
	for i := range px {
		px[i] = 200
	}
	out := tensor.Must(tensor.NewLike(batch, tensor.Uint8))
	b := perturb.Blackening{PatchSize: 2, Prob: 0.5}
	if err := b.ApplyBatch(out, batch, 1234, []uint64{7, 8}); err != nil {
		fmt.Println(err)
	}
	o, _ := out.Uint8s()
	for i, id := range []uint64{7, 8} {
		g, _ := b.Grid(4, 4, 1234, id)
		zeros := 0
		for _, v := range o[i*48 : (i+1)*48] {
			if v == 0 {
				zeros++
			}
		}
		fmt.Println("image", i, "black patches", g.Black, "zero bytes", zeros)
	}
	// Output:
	// image 0 black patches [false true true true] zero bytes 36
	// image 1 black patches [true false false true] zero bytes 24
}

func ExampleParseKind() {
	kind, err := perturb.ParseKind("gaussian_noise")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := perturb.Default(kind)
	fmt.Printf("%v %+v\n", p.Kind(), p)
	_, err = perturb.ParseKind("salt_pepper")
	fmt.Println(err)
	// Output:
	// gaussian_noise {Mean:0 Std:189}
	// perturb.ParseKind: s: unknown perturbation "salt_pepper" (want patch_blackening, gaussian_noise, complete_masking or gaussian_blur): invalid parameter
}
