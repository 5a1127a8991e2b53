package tensor_test

import (
	"errors"
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

func ExampleLogProbEntropy() {
	// Two positions over a vocabulary of three tokens.
	logits := tensor.Must(tensor.FromFloat32([]float32{
		0, 0, 0, // uniform: entropy ln 3
		10, 0, 0, // confident in token 0
	}, 2, 3))
	targets := tensor.Must(tensor.FromInt32([]int32{1, 0}, 2))
	logp := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2))
	entropy := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2))
	if err := tensor.LogProbEntropy(logp, entropy, logits, targets, 1); err != nil {
		panic(err)
	}
	lp, _ := logp.Float32s()
	ent, _ := entropy.Float32s()
	fmt.Printf("logp    %.4f %.4f\nentropy %.4f %.4f\n", lp[0], lp[1], ent[0], ent[1])
	// Output:
	// logp    -1.0986 -0.0001
	// entropy 1.0986 0.0010
}

func ExampleMaskedWhiten() {
	values := tensor.Must(tensor.FromFloat32([]float32{1, 2, 3, 100}, 1, 4))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 0}, 1, 4)) // the last is padding
	mean, _ := tensor.MaskedMean(values, mask)
	if err := tensor.MaskedWhiten(values, values, mask); err != nil { // in place
		panic(err)
	}
	v, _ := values.Float32s()
	fmt.Printf("mean %.1f, whitened %.3f\n", mean, v[:3])
	// Output: mean 2.0, whitened [-1.000 0.000 1.000]
}

func ExampleTopPMask() {
	scores := tensor.Must(tensor.FromFloat32([]float32{0.1, 0.9, 0.5, 0.9, 0.3}, 1, 5))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 1, 1}, 1, 5))
	sel := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 5))
	// Keep ceil(5*0.4) = 2 tokens; the tie at 0.9 keeps both (indices 1 and 3).
	if err := tensor.TopPMask(sel, scores, mask, 0.4); err != nil {
		panic(err)
	}
	s, _ := sel.Float32s()
	fmt.Println(s)
	// Output: [0 1 0 1 0]
}

func ExampleError() {
	values := tensor.Must(tensor.FromFloat32(make([]float32, 6), 2, 3))
	mask := tensor.Must(tensor.FromFloat32(make([]float32, 4), 2, 2))
	_, err := tensor.MaskedMean(values, mask)
	fmt.Println(err)
	fmt.Println(errors.Is(err, tensor.ErrShape))
	// Output:
	// tensor.MaskedMean: mask: has shape [2 2], values has [2 3]: bad shape
	// true
}
