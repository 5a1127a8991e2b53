package tensor_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// A linear layer with a Hugging Face-layout weight [out, in], packed once and used for every
// call.
func ExampleLinearBias() {
	w := tensor.Must(tensor.FromFloat32([]float32{1, 0, 0, 1, 1, 1}, 3, 2)) // 2 in, 3 out
	pw, _ := tensor.PackWeight(w)
	x := tensor.Must(tensor.FromFloat32([]float32{1, 2}, 1, 2))
	bias := tensor.Must(tensor.FromFloat32([]float32{0.5, 0.5, 0.5}))
	y := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 3))
	if err := tensor.LinearBias(y, x, pw, bias); err != nil {
		fmt.Println(err)
	}
	v, _ := y.Float32s()
	fmt.Println(v)
	// Output: [1.5 2.5 3.5]
}

// Causal attention over three tokens with one head: the first token can only see itself.
func ExampleAttention() {
	q := tensor.Must(tensor.FromFloat32([]float32{1, 0, 1, 0, 1, 0}, 3, 1, 2))
	k := tensor.Must(tensor.FromFloat32([]float32{1, 0, 1, 0, 1, 0}, 3, 1, 2))
	v := tensor.Must(tensor.FromFloat32([]float32{1, 0, 0, 1, 2, 2}, 3, 1, 2))
	out := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 3, 1, 2))
	err := tensor.Attention(out, tensor.AttentionInputs{Q: q, K: k, V: v}, tensor.DefaultAttentionConfig(2, true))
	if err != nil {
		fmt.Println(err)
	}
	o, _ := out.Float32s()
	fmt.Println(o) // equal scores: the mean of the visible values
	// Output: [1 0 0.5 0.5 1 1]
}
