package vlm_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tensor"
)

func Example() {
	cfg := vlm.Config{ImageSize: 8, PatchSize: 4, Channels: 3, Vocab: 16, Dim: 16, Layers: 1, Heads: 2, MLPDim: 32, MaxLen: 8}
	m, err := vlm.New(cfg, 1)
	if err != nil {
		panic(err)
	}
	images := tensor.Must(tensor.New(tensor.CPU(), tensor.Uint8, 2, 8, 8, 3))
	tokens := tensor.Must(tensor.FromInt32([]int32{vlm.BOS, 5, 6, vlm.EOS, vlm.BOS, 7, vlm.EOS, vlm.PAD}, 2, 4))
	logits, act, err := m.Forward(images, tokens)
	if err != nil {
		panic(err)
	}
	dlogits := tensor.Must(tensor.NewLike(logits, tensor.Float32))
	if err := m.Backward(act, dlogits); err != nil {
		panic(err)
	}
	fmt.Println("logits", logits.Shape(), "params", len(m.Params()), m.Params()[0].Name)
	// Output: logits [2 4 16] params 21 patch.w
}
