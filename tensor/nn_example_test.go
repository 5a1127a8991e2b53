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

// The fused LM head over a vocabulary of three for one token whose logits are all zero, then the
// gradient of its log-probability into the hidden state with the head frozen (a nil dweight:
// the head's gradient is not computed at all).
func ExampleLMHeadBackward() {
	w := tensor.Must(tensor.FromFloat32([]float32{1, 0, 0, 1, 1, 1}, 3, 2)) // V = 3, D = 2
	pw, _ := tensor.PackWeight(w)
	in := tensor.LMHeadInputs{
		Hidden:      tensor.Must(tensor.FromFloat32([]float32{0, 0}, 1, 2)),
		Weight:      pw,
		Targets:     tensor.Must(tensor.FromInt32([]int32{0}, 1)),
		Temperature: 1,
	}
	zeros := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	lp, ent, dh := zeros(1), zeros(1), zeros(1, 2)
	if err := tensor.LMHeadLogProbs(lp, ent, in); err != nil {
		fmt.Println(err)
	}
	dlogp := tensor.Must(tensor.FromFloat32([]float32{1}, 1))
	err := tensor.LMHeadBackward(dh, nil, tensor.LMHeadGrad{LMHeadInputs: in, LogProbs: lp, Entropy: ent, DLogProbs: dlogp})
	if err != nil {
		fmt.Println(err)
	}
	l, _ := lp.Float32s()
	e, _ := ent.Float32s()
	g, _ := dh.Float32s()
	// d logp/d logits = onehot − p = (2/3, −1/3, −1/3); times W gives (1/3, −2/3).
	fmt.Printf("logp %.4f entropy %.4f dhidden [%.4f %.4f]\n", l[0], e[0], g[0], g[1])
	// Output: logp -1.0986 entropy 1.0986 dhidden [0.3333 -0.6667]
}

// A residual connection (beta 1: y += x) and a scaled copy that never reads its output (beta
// 0), on whatever backend the tensors live.
func ExampleAxpby() {
	y := tensor.Must(tensor.FromFloat32([]float32{1, 2, 3}))
	x := tensor.Must(tensor.FromFloat32([]float32{10, 20, 30}))
	if err := tensor.Axpby(y, x, 1, 1); err != nil { // y += x
		fmt.Println(err)
	}
	v, _ := y.Float32s()
	fmt.Println(v)
	if err := tensor.Axpby(y, x, 0.5, 0); err != nil { // y = 0.5·x
		fmt.Println(err)
	}
	fmt.Println(v)
	// Output:
	// [11 22 33]
	// [5 10 15]
}
