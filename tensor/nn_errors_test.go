package tensor_test

import (
	"errors"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestTransformerOpErrors: each bad input of the transformer ops is an error naming the op and
// wrapping the right sentinel, never a panic.
func TestTransformerOpErrors(t *testing.T) {
	f := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, s...)) }
	i32 := func(v ...int32) *tensor.Tensor { return tensor.Must(tensor.FromInt32(v)) }
	bf := tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, 4, 3))
	b16 := func(s ...int) *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, s...)) }
	w, _ := tensor.PackWeight(f(5, 3))
	lmIn := tensor.LMHeadInputs{Hidden: f(2, 3), Weight: w, Targets: i32(0, 4), Temperature: 1}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"MatMul inner dims", tensor.MatMul(f(2, 4), f(2, 3), f(4, 4), tensor.MatMulOptions{}), tensor.ErrShape},
		{"MatMul bf16 output", tensor.MatMul(bf, f(4, 2), f(2, 3), tensor.MatMulOptions{}), tensor.ErrDType},
		{"MatMul batch", tensor.MatMul(f(2, 4, 4), f(2, 4, 3), f(3, 3, 4), tensor.MatMulOptions{}), tensor.ErrShape},
		{"PackWeight rank", func() error { _, err := tensor.PackWeight(f(3)); return err }(), tensor.ErrShape},
		{"Linear width", tensor.Linear(f(2, 5), f(2, 4), w), tensor.ErrShape},
		{"LinearBias nil", tensor.LinearBias(f(2, 5), f(2, 3), w, nil), tensor.ErrShape},
		{"LinearBackward DWeight", tensor.LinearBackward(tensor.LinearGradOut{DWeight: f(3, 5)}, tensor.LinearGrad{X: f(2, 3), Weight: w, DY: f(2, 5)}), tensor.ErrShape},
		{"RMSNorm weight", tensor.RMSNorm(f(2, 4), f(2, 4), f(3), 1e-6), tensor.ErrShape},
		{"RMSNorm eps", tensor.RMSNorm(f(2, 4), f(2, 4), f(4), -1), tensor.ErrParam},
		{"LayerNorm bias", tensor.LayerNorm(f(2, 4), f(2, 4), f(4), nil, 1e-5), tensor.ErrShape},
		{"LayerNormStats rstd", tensor.LayerNormStats(f(2, 4), f(2), f(3), f(2, 4), f(4), f(4), 1e-5), tensor.ErrShape},
		{"RMSNormStats rstd dtype", tensor.RMSNormStats(f(2, 4), b16(2), f(2, 4), f(4), 1e-6), tensor.ErrDType},
		{"RMSNormBackward Mean", tensor.RMSNormBackward(f(2, 4), f(4), tensor.NormGrad{X: f(2, 4), Weight: f(4), DY: f(2, 4), Mean: f(2), Rstd: f(2)}), tensor.ErrParam},
		{"LayerNormBackward Rstd alone", tensor.LayerNormBackward(f(2, 4), f(4), f(4), tensor.NormGrad{X: f(2, 4), Weight: f(4), DY: f(2, 4), Rstd: f(2)}), tensor.ErrParam},
		{"LayerNormBackward Mean shape", tensor.LayerNormBackward(f(2, 4), f(4), f(4), tensor.NormGrad{X: f(2, 4), Weight: f(4), DY: f(2, 4), Mean: f(2, 1), Rstd: f(2)}), tensor.ErrShape},
		{"RoPE odd D", tensor.RoPE(f(2, 1, 3), f(2, 1, 3), i32(0, 1), tensor.RoPEConfig{Theta: 1e4}), tensor.ErrShape},
		{"RoPE sections", tensor.RoPE(f(2, 1, 8), f(2, 1, 8), tensor.Must(tensor.FromInt32(make([]int32, 6), 3, 2)), tensor.RoPEConfig{Theta: 1e4, Sections: []int{1, 1, 1}}), tensor.ErrParam},
		{"RoPE theta", tensor.RoPE(f(2, 1, 4), f(2, 1, 4), i32(0, 1), tensor.RoPEConfig{}), tensor.ErrParam},
		{"RoPE frequencies count", tensor.RoPE(f(2, 1, 4), f(2, 1, 4), i32(0, 1), tensor.RoPEConfig{Frequencies: []float64{1}}), tensor.ErrParam},
		{"RoPE frequency", tensor.RoPE(f(2, 1, 4), f(2, 1, 4), i32(0, 1), tensor.RoPEConfig{Frequencies: []float64{1, -1}}), tensor.ErrParam},
		{"Attention heads", tensor.Attention(f(4, 3, 8), tensor.AttentionInputs{Q: f(4, 3, 8), K: f(4, 2, 8), V: f(4, 2, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrShape},
		{"Attention scale", tensor.Attention(f(4, 2, 8), tensor.AttentionInputs{Q: f(4, 2, 8), K: f(4, 1, 8), V: f(4, 1, 8)}, tensor.AttentionConfig{}), tensor.ErrParam},
		{"Attention cu_seqlens", tensor.Attention(f(4, 2, 8), tensor.AttentionInputs{Q: f(4, 2, 8), K: f(4, 1, 8), V: f(4, 1, 8),
			CuSeqlensQ: i32(0, 3, 2, 4), CuSeqlensK: i32(0, 1, 2, 4)}, tensor.DefaultAttentionConfig(8, false)), tensor.ErrParam},
		{"Attention one cu_seqlens", tensor.Attention(f(4, 2, 8), tensor.AttentionInputs{Q: f(4, 2, 8), K: f(4, 1, 8), V: f(4, 1, 8),
			CuSeqlensQ: i32(0, 4)}, tensor.DefaultAttentionConfig(8, false)), tensor.ErrShape},
		{"Attention bf16 K, f32 Q", tensor.Attention(f(4, 2, 8), tensor.AttentionInputs{Q: f(4, 2, 8), K: b16(4, 1, 8), V: f(4, 1, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"Attention f32 out, bf16 QKV", tensor.Attention(f(4, 2, 8), tensor.AttentionInputs{Q: b16(4, 2, 8), K: b16(4, 1, 8), V: b16(4, 1, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"AttentionLSE bf16 lse", tensor.AttentionLSE(b16(4, 2, 8), b16(4, 2), tensor.AttentionInputs{Q: b16(4, 2, 8), K: b16(4, 1, 8), V: b16(4, 1, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"Attention int32 Q", tensor.Attention(f(2, 1, 2), tensor.AttentionInputs{Q: tensor.Must(tensor.FromInt32(make([]int32, 4), 2, 1, 2)), K: f(2, 1, 2), V: f(2, 1, 2)}, tensor.DefaultAttentionConfig(2, true)), tensor.ErrDType},
		{"AttentionBackward f32 dk, bf16 QKV", tensor.AttentionBackward(b16(4, 2, 8), f(4, 1, 8), b16(4, 1, 8), tensor.AttentionGrad{
			AttentionInputs: tensor.AttentionInputs{Q: b16(4, 2, 8), K: b16(4, 1, 8), V: b16(4, 1, 8)}, Out: b16(4, 2, 8), LSE: f(4, 2), DOut: b16(4, 2, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"AttentionBackward bf16 LSE", tensor.AttentionBackward(b16(4, 2, 8), b16(4, 1, 8), b16(4, 1, 8), tensor.AttentionGrad{
			AttentionInputs: tensor.AttentionInputs{Q: b16(4, 2, 8), K: b16(4, 1, 8), V: b16(4, 1, 8)}, Out: b16(4, 2, 8), LSE: b16(4, 2), DOut: b16(4, 2, 8)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"AttentionDecode bf16 cache, f32 Q", tensor.AttentionDecode(f(1, 1, 2, 8), tensor.DecodeInputs{Q: f(1, 1, 2, 8), KCache: b16(1, 6, 1, 8), VCache: b16(1, 6, 1, 8), Lens: i32(1)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrDType},
		{"KVCacheWrite f32 into bf16 cache", tensor.KVCacheWrite(b16(1, 6, 1, 8), f(1, 2, 1, 8), i32(0)), tensor.ErrDType},
		{"AttentionDecode lens", tensor.AttentionDecode(f(1, 2, 2, 8), tensor.DecodeInputs{Q: f(1, 2, 2, 8), KCache: f(1, 6, 1, 8), VCache: f(1, 6, 1, 8), Lens: i32(1)}, tensor.DefaultAttentionConfig(8, true)), tensor.ErrParam},
		{"KVCacheWrite start", tensor.KVCacheWrite(f(1, 6, 1, 8), f(1, 2, 1, 8), i32(5)), tensor.ErrParam},
		{"Activate kind", tensor.Activate(f(3), f(3), tensor.Activation(0)), tensor.ErrParam},
		{"SwiGLU shapes", tensor.SwiGLU(f(3), f(3), f(4)), tensor.ErrShape},
		{"Embedding id", tensor.Embedding(f(2, 3), f(5, 3), i32(1, 5)), tensor.ErrParam},
		{"AdamW step", tensor.AdamWStep(tensor.AdamWParams{Param: f(3), Grad: f(3), ExpAvg: f(3), ExpAvgSq: f(3)}, 0, tensor.DefaultAdamWConfig(1e-3)), tensor.ErrParam},
		{"AdamW beta", tensor.AdamWStep(tensor.AdamWParams{Param: f(3), Grad: f(3), ExpAvg: f(3), ExpAvgSq: f(3)}, 1, tensor.AdamWConfig{LR: 1, Beta1: 1, Beta2: 0.9}), tensor.ErrParam},
		{"ClipGradNorm max", func() error { _, err := tensor.ClipGradNorm([]*tensor.Tensor{f(3)}, 0); return err }(), tensor.ErrParam},
		// The non-GEMM ops: activations of one dtype, parameters float32 or that dtype,
		// parameter gradients float32.
		{"RMSNorm bf16 y, f32 x", tensor.RMSNorm(b16(2, 4), f(2, 4), f(4), 1e-6), tensor.ErrDType},
		{"RMSNorm f32 x, bf16 w", tensor.RMSNorm(f(2, 4), f(2, 4), b16(4), 1e-6), tensor.ErrDType},
		{"RMSNorm int32 x", tensor.RMSNorm(i32(0, 1), i32(0, 1), f(2), 1e-6), tensor.ErrDType},
		{"LayerNorm bf16, f32 y", tensor.LayerNorm(f(2, 4), b16(2, 4), b16(4), b16(4), 1e-5), tensor.ErrDType},
		{"RMSNormBackward bf16 dw", tensor.RMSNormBackward(b16(2, 4), b16(4), tensor.NormGrad{X: b16(2, 4), Weight: b16(4), DY: b16(2, 4)}), tensor.ErrDType},
		{"LayerNormBackward f32 DY", tensor.LayerNormBackward(b16(2, 4), f(4), f(4), tensor.NormGrad{X: b16(2, 4), Weight: f(4), DY: f(2, 4)}), tensor.ErrDType},
		{"RoPE bf16 y, f32 x", tensor.RoPE(b16(2, 1, 4), f(2, 1, 4), i32(0, 1), tensor.RoPEConfig{Theta: 1e4}), tensor.ErrDType},
		{"Activate f32 y, bf16 x", tensor.Activate(f(3), b16(3), tensor.GELU), tensor.ErrDType},
		{"ActivateBackward bf16 DY", tensor.ActivateBackward(f(3), tensor.ActivationGrad{X: f(3), DY: b16(3), Activation: tensor.SiLU}), tensor.ErrDType},
		{"SwiGLU bf16 up", tensor.SwiGLU(f(3), f(3), b16(3)), tensor.ErrDType},
		{"SwiGLUBackward bf16 dgate", tensor.SwiGLUBackward(b16(3), f(3), tensor.SwiGLUGrad{Gate: f(3), Up: f(3), DY: f(3)}), tensor.ErrDType},
		{"Embedding f32 y, bf16 table", tensor.Embedding(f(2, 3), b16(5, 3), i32(1, 2)), tensor.ErrDType},
		{"EmbeddingBackward bf16 dtable", tensor.EmbeddingBackward(b16(5, 3), tensor.EmbeddingGrad{IDs: i32(1, 2), DY: b16(2, 3)}), tensor.ErrDType},
		{"LMHead target", tensor.LMHeadLogProbs(f(2), f(2), tensor.LMHeadInputs{Hidden: f(2, 3), Weight: w, Targets: i32(0, 5), Temperature: 1}), tensor.ErrParam},
		{"LMHead entropy", tensor.LMHeadLogProbs(f(2), nil, lmIn), tensor.ErrShape},
		{"LMHead temperature", tensor.LMHeadLogProbs(f(2), f(2), tensor.LMHeadInputs{Hidden: f(2, 3), Weight: w, Targets: i32(0, 4)}), tensor.ErrParam},
		{"LMHeadBackward dweight", tensor.LMHeadBackward(f(2, 3), f(4, 3), tensor.LMHeadGrad{LMHeadInputs: lmIn, LogProbs: f(2), Entropy: f(2)}), tensor.ErrShape},
	} {
		var te *tensor.Error
		if !errors.Is(c.err, c.want) || !errors.As(c.err, &te) {
			t.Errorf("%s: got %v, want an *tensor.Error wrapping %v", c.name, c.err, c.want)
		} else if testing.Verbose() && errors.Is(c.err, tensor.ErrDType) {
			t.Logf("%s: %v", c.name, c.err)
		}
	}
}
