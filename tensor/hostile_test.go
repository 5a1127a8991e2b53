package tensor_test

import (
	"fmt"
	"testing"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// tensorFuncs lists every exported function and method of tensor (and the CPU backend's
// methods, reached through the Backend interface), for TestHostileInputs and
// TestConcurrentCalls.
// UnmarshalText is called on a valid receiver: decoding into a nil pointer is the caller's bug,
// as with any encoding.TextUnmarshaler.
func tensorFuncs() map[string]any {
	cpu := tensor.CPU()
	funcs := map[string]any{
		"BF16.Float32":           tensor.BF16.Float32,
		"BF16FromFloat32":        tensor.BF16FromFloat32,
		"RoundToBF16":            tensor.RoundToBF16,
		"WidenBF16":              tensor.WidenBF16,
		"RoundFloat32s":          tensor.RoundFloat32s,
		"CPU":                    tensor.CPU,
		"CPU().Alloc":            cpu.Alloc,
		"CPU().Upload":           cpu.Upload,
		"CPU().Download":         cpu.Download,
		"CPU().Copy":             cpu.Copy,
		"CPU().Sync":             cpu.Sync,
		"CPU().Close":            cpu.Close,
		"CPU().Name":             cpu.Name,
		"CheckDType":             tensor.CheckDType,
		"CheckFinite":            tensor.CheckFinite,
		"CheckRange":             tensor.CheckRange,
		"CheckSameBackend":       tensor.CheckSameBackend,
		"CheckSameShape":         tensor.CheckSameShape,
		"CheckShape":             tensor.CheckShape,
		"CheckSize":              tensor.CheckSize,
		"CheckTensor":            tensor.CheckTensor,
		"CheckUnit":              tensor.CheckUnit,
		"CopyInto":               tensor.CopyInto,
		"DType.MarshalText":      tensor.DType.MarshalText,
		"DType.Size":             tensor.DType.Size,
		"DType.String":           tensor.DType.String,
		"DType.Valid":            tensor.DType.Valid,
		"DType.UnmarshalText":    func(b []byte) error { var d tensor.DType; return d.UnmarshalText(b) },
		"Error.Error":            (*tensor.Error).Error,
		"Error.Unwrap":           (*tensor.Error).Unwrap,
		"Errorf":                 tensor.Errorf,
		"FromBF16":               tensor.FromBF16,
		"FromFloat32":            tensor.FromFloat32,
		"FromInt32":              tensor.FromInt32,
		"FromUint8":              tensor.FromUint8,
		"HostFloat32s":           tensor.HostFloat32s,
		"KernelOf":               tensor.KernelOf[tensor.TopPKernel],
		"LogProbEntropy":         tensor.LogProbEntropy,
		"LogProbEntropyBackward": tensor.LogProbEntropyBackward,
		"LogProbs":               tensor.LogProbs,
		"MaskedMean":             tensor.MaskedMean,
		"MaskedMeanRows":         tensor.MaskedMeanRows,
		"MaskedSum":              tensor.MaskedSum,
		"MaskedVar":              tensor.MaskedVar,
		"MaskedWhiten":           tensor.MaskedWhiten,
		"New":                    tensor.New,
		"NewScratch":             tensor.NewScratch,
		"Scratch.Backend":        (*tensor.Scratch).Backend,
		"Scratch.New":            (*tensor.Scratch).New,
		"Scratch.Put":            (*tensor.Scratch).Put,
		"Scratch.Release":        (*tensor.Scratch).Release,
		"NewLike":                tensor.NewLike,
		"OnHost":                 tensor.OnHost,
		"ParseDType":             tensor.ParseDType,
		"ResponseMask":           tensor.ResponseMask,
		"Scalar":                 tensor.Scalar,
		"Shape.Equal":            tensor.Shape.Equal,
		"Shape.NumElements":      tensor.Shape.NumElements,
		"Shape.String":           tensor.Shape.String,
		"Tensor.BF16s":           (*tensor.Tensor).BF16s,
		"Tensor.Backend":         (*tensor.Tensor).Backend,
		"Tensor.DType":           (*tensor.Tensor).DType,
		"Tensor.Dim":             (*tensor.Tensor).Dim,
		"Tensor.Float32s":        (*tensor.Tensor).Float32s,
		"Tensor.Int32s":          (*tensor.Tensor).Int32s,
		"Tensor.IsHost":          (*tensor.Tensor).IsHost,
		"Tensor.Len":             (*tensor.Tensor).Len,
		"Tensor.Rank":            (*tensor.Tensor).Rank,
		"Tensor.Release":         (*tensor.Tensor).Release,
		"Tensor.Reshape":         (*tensor.Tensor).Reshape,
		"Tensor.Rows":            (*tensor.Tensor).Rows,
		"Tensor.Shape":           (*tensor.Tensor).Shape,
		"Tensor.Storage":         (*tensor.Tensor).Storage,
		"Tensor.String":          (*tensor.Tensor).String,
		"Tensor.Uint8s":          (*tensor.Tensor).Uint8s,
		"To":                     tensor.To,
		"TopPCount":              tensor.TopPCount,
		"TopPMask":               tensor.TopPMask,
		"TopPMaskTieBreak":       tensor.TopPMaskTieBreak,
	}
	// The transformer op families (issue 21).
	for name, f := range map[string]any{
		"Activate":                    tensor.Activate,
		"ActivateBackward":            tensor.ActivateBackward,
		"Activation.MarshalText":      tensor.Activation.MarshalText,
		"Activation.String":           tensor.Activation.String,
		"Activation.UnmarshalText":    func(b []byte) error { var a tensor.Activation; return a.UnmarshalText(b) },
		"AdamWStep":                   tensor.AdamWStep,
		"Attention":                   tensor.Attention,
		"AttentionBackward":           tensor.AttentionBackward,
		"AttentionDecode":             tensor.AttentionDecode,
		"AttentionLSE":                tensor.AttentionLSE,
		"ClipGradNorm":                tensor.ClipGradNorm,
		"DefaultAdamWConfig":          tensor.DefaultAdamWConfig,
		"DefaultAttentionConfig":      tensor.DefaultAttentionConfig,
		"Embedding":                   tensor.Embedding,
		"EmbeddingBackward":           tensor.EmbeddingBackward,
		"GradNorm":                    tensor.GradNorm,
		"KVCacheWrite":                tensor.KVCacheWrite,
		"LMHeadBackward":              tensor.LMHeadBackward,
		"LMHeadLogProbs":              tensor.LMHeadLogProbs,
		"LayerNorm":                   tensor.LayerNorm,
		"LayerNormBackward":           tensor.LayerNormBackward,
		"LayerNormStats":              tensor.LayerNormStats,
		"Linear":                      tensor.Linear,
		"LinearBackward":              tensor.LinearBackward,
		"LinearBias":                  tensor.LinearBias,
		"MatMul":                      tensor.MatMul,
		"PackWeight":                  tensor.PackWeight,
		"PackedWeight.Dims":           (*tensor.PackedWeight).Dims,
		"PackedWeight.DropValues":     (*tensor.PackedWeight).DropValues,
		"PackedWeight.KeepTransposed": (*tensor.PackedWeight).KeepTransposed,
		"PackedWeight.Packed":         (*tensor.PackedWeight).Packed,
		"PackedWeight.Row":            (*tensor.PackedWeight).Row,
		"PackedWeight.Values":         (*tensor.PackedWeight).Values,
		"PackedWeight.Repack":         (*tensor.PackedWeight).Repack,
		"PackedWeight.Weight":         (*tensor.PackedWeight).Weight,
		"ParseActivation":             tensor.ParseActivation,
		"RMSNorm":                     tensor.RMSNorm,
		"RMSNormBackward":             tensor.RMSNormBackward,
		"RMSNormStats":                tensor.RMSNormStats,
		"RoPE":                        tensor.RoPE,
		"RoPEBackward":                tensor.RoPEBackward,
		"SwiGLU":                      tensor.SwiGLU,
		"SwiGLUBackward":              tensor.SwiGLUBackward,
		"Axpby":                       tensor.Axpby,
		"Mul":                         tensor.Mul,
	} {
		funcs[name] = f
	}
	return funcs
}

// tensorValues are the plausible arguments tried first: backends, dtypes, storages, logits
// with in-range targets, and an OnHost callback that reads and writes its tensors.
func tensorValues() *hostile.Values {
	v := hostile.NewValues()
	hostile.AddAs[tensor.Backend](v, tensor.CPU(), hostile.Device(), nil)
	v.Add(tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Uint8, tensor.DType(0), tensor.DType(9))
	hostile.Gen(v, "cpu storage of 24 bytes", func() tensor.Storage { s, _ := hostile.F32(2, 3).Storage(); return s })
	hostile.Gen(v, "device storage of 24 bytes", func() tensor.Storage { s, _ := hostile.OnDevice(hostile.F32(2, 3)).Storage(); return s })
	hostile.AddAs[tensor.Storage](v, nil)
	hostile.Gen(v, "logits f32[2 3 5]", func() *tensor.Tensor { return hostile.F32(2, 3, 5) })
	hostile.Gen(v, "targets i32[2 3]", func() *tensor.Tensor { return hostile.I32([]int32{0, 4, 2, 1, 3, 0}, 2, 3) })
	v.Add(tensor.LogProbGrad{Logits: hostile.F32(2, 3, 5), Targets: hostile.I32([]int32{0, 4, 2, 1, 3, 0}, 2, 3),
		LogProbs: hostile.F32(2, 3), Entropy: hostile.F32(2, 3), DLogProbs: hostile.F32(2, 3), DEntropy: hostile.F32(2, 3), Temperature: 1})
	v.Add(func(h []*tensor.Tensor) error {
		for _, t := range h {
			if x, err := t.Float32s(); err == nil && len(x) > 0 {
				x[0]++
			}
		}
		return nil
	})
	v.Add([]string{"a", "b", "c"}, []byte("bfloat16"), tensor.ErrShape)
	addOpValues(v)
	return v
}

// The transformer op families' arguments: one consistent small call of each — x [2, 3], a weight
// [4, 3], attention with 2 query heads over 1 key/value head of dimension 4 in two sequences, a
// decode batch of one with a cache of 3 — from which the harness varies one argument or field
// at a time, so that each check behind the others is reached.

func ids(data ...int32) *tensor.Tensor { return hostile.I32(data, len(data)) }

func packed(w *tensor.Tensor) *tensor.PackedWeight {
	p, err := tensor.PackWeight(w)
	if err != nil {
		panic(err)
	}
	return p
}

func opWeight() *tensor.PackedWeight { return packed(hostile.F32(4, 3)) }

func opLinearGrad() tensor.LinearGrad {
	return tensor.LinearGrad{X: hostile.F32(2, 3), Weight: opWeight(), DY: hostile.F32(2, 4)}
}

func opLinearGradOut() tensor.LinearGradOut {
	return tensor.LinearGradOut{DX: hostile.F32(2, 3), DWeight: hostile.F32(4, 3), DBias: hostile.F32(4)}
}

func opNormGrad() tensor.NormGrad {
	return tensor.NormGrad{X: hostile.F32(2, 3), Weight: hostile.F32(3), DY: hostile.F32(2, 3), Eps: 1e-6}
}

var opRoPE = tensor.RoPEConfig{Theta: 10000}

func opRoPEGrad() tensor.RoPEGrad {
	return tensor.RoPEGrad{DY: hostile.F32(2, 3, 4), Positions: ids(0, 5), Config: opRoPE}
}

var opAttn = tensor.DefaultAttentionConfig(4, true)

func opAttnInputs() tensor.AttentionInputs {
	return tensor.AttentionInputs{Q: hostile.F32(2, 2, 4), K: hostile.F32(2, 1, 4), V: hostile.F32(2, 1, 4),
		CuSeqlensQ: ids(0, 1, 2), CuSeqlensK: ids(0, 1, 2)}
}

func opAttnGrad() tensor.AttentionGrad {
	return tensor.AttentionGrad{AttentionInputs: opAttnInputs(), Out: hostile.F32(2, 2, 4), LSE: hostile.F32(2, 2), DOut: hostile.F32(2, 2, 4)}
}

func opDecode() tensor.DecodeInputs {
	return tensor.DecodeInputs{Q: hostile.F32(1, 1, 2, 4), KCache: hostile.F32(1, 3, 1, 4), VCache: hostile.F32(1, 3, 1, 4), Lens: ids(2)}
}

func opActGrad() tensor.ActivationGrad {
	return tensor.ActivationGrad{X: hostile.F32(2, 3), DY: hostile.F32(2, 3), Activation: tensor.GELU}
}

func opSwiGLUGrad() tensor.SwiGLUGrad {
	return tensor.SwiGLUGrad{Gate: hostile.F32(2, 3), Up: hostile.F32(2, 3), DY: hostile.F32(2, 3)}
}

func opEmbGrad() tensor.EmbeddingGrad {
	return tensor.EmbeddingGrad{IDs: ids(0, 1), DY: hostile.F32(2, 3)}
}

func opAdamW() tensor.AdamWParams {
	bf := tensor.Must(tensor.FromBF16(make([]tensor.BF16, 6), 2, 3))
	return tensor.AdamWParams{Param: hostile.F32(2, 3), Grad: hostile.F32(2, 3), ExpAvg: hostile.F32(2, 3), ExpAvgSq: hostile.F32(2, 3), ParamBF16: bf}
}

func opLMInputs() tensor.LMHeadInputs {
	return tensor.LMHeadInputs{Hidden: hostile.F32(2, 3), Weight: opWeight(), Targets: ids(3, 0), Temperature: 1}
}

func opLMGrad() tensor.LMHeadGrad {
	return tensor.LMHeadGrad{LMHeadInputs: opLMInputs(), LogProbs: hostile.F32(2), Entropy: hostile.F32(2),
		DLogProbs: hostile.F32(2), DEntropy: hostile.F32(2)}
}

// addOpValues registers the op families' plausible arguments for every function.
func addOpValues(v *hostile.Values) {
	for _, s := range [][]int{{2, 4}, {3, 4}, {4, 3}, {4}, {2, 2, 4}, {2, 1, 4}, {2, 2}, {1, 1, 2, 4}, {1, 3, 1, 4}, {1, 1, 1, 4}} {
		hostile.Gen(v, fmt.Sprintf("f32%v", s), func() *tensor.Tensor { return hostile.F32(s...) })
	}
	// bfloat16 operands in the shapes of the valid calls (norms, RoPE, activations, embedding,
	// attention): one argument or field at a time makes a mixed-dtype call.
	for _, sh := range [][]int{{2, 3}, {3}, {4, 3}, {2, 3, 4}, {2, 2, 4}, {2, 1, 4}, {2, 2}, {1, 1, 2, 4}, {1, 3, 1, 4}, {1, 1, 1, 4}} {
		hostile.Gen(v, fmt.Sprintf("bf16%v", sh), func() *tensor.Tensor { return tensor.Must(tensor.New(tensor.CPU(), tensor.BFloat16, sh...)) })
	}
	hostile.Gen(v, "i32[3] cu_seqlens 0 1 2", func() *tensor.Tensor { return ids(0, 1, 2) })
	hostile.Gen(v, "i32[1] 2", func() *tensor.Tensor { return ids(2) })
	hostile.Gen(v, "i32[2 2] mrope positions", func() *tensor.Tensor { return hostile.I32([]int32{0, 1, 0, 2}, 2, 2) })
	hostile.Gen(v, "packed f32[4 3]", opWeight)
	hostile.Gen(v, "packed device f32[4 3]", func() *tensor.PackedWeight { return packed(hostile.OnDevice(hostile.F32(4, 3))) })
	v.Add(tensor.SiLU, tensor.QuickGELU, tensor.Activation(0), tensor.Activation(99))
	v.Add(tensor.MatMulOptions{}, tensor.MatMulOptions{TransA: true, TransB: true, Accumulate: true})
	v.Add(opRoPE, tensor.RoPEConfig{Theta: 10000, Sections: []int{1, 1}}, opAttn, tensor.DefaultAdamWConfig(1e-3))
	hostile.Gen(v, "linear grad", opLinearGrad)
	hostile.Gen(v, "linear grad out", opLinearGradOut)
	hostile.Gen(v, "norm grad", opNormGrad)
	hostile.Gen(v, "rope grad", opRoPEGrad)
	hostile.Gen(v, "attention inputs", opAttnInputs)
	hostile.Gen(v, "attention grad", opAttnGrad)
	hostile.Gen(v, "decode inputs", opDecode)
	hostile.Gen(v, "activation grad", opActGrad)
	hostile.Gen(v, "swiglu grad", opSwiGLUGrad)
	hostile.Gen(v, "embedding grad", opEmbGrad)
	hostile.Gen(v, "adamw params", opAdamW)
	hostile.Gen(v, "lm head inputs", opLMInputs)
	hostile.Gen(v, "lm head grad", opLMGrad)
}

// opValid are the op families' valid calls (each must succeed).
func opValid() map[string]func() []any {
	f := hostile.F32
	return map[string]func() []any{
		"Activate":                 func() []any { return []any{f(2, 3), f(2, 3), tensor.SiLU} },
		"ActivateBackward":         func() []any { return []any{f(2, 3), opActGrad()} },
		"Activation.MarshalText":   func() []any { return []any{tensor.GELUTanh} },
		"Activation.UnmarshalText": func() []any { return []any{[]byte("quick_gelu")} },
		"AdamWStep":                func() []any { return []any{opAdamW(), 1, tensor.DefaultAdamWConfig(1e-3)} },
		"Attention":                func() []any { return []any{f(2, 2, 4), opAttnInputs(), opAttn} },
		"AttentionBackward":        func() []any { return []any{f(2, 2, 4), f(2, 1, 4), f(2, 1, 4), opAttnGrad(), opAttn} },
		"AttentionDecode":          func() []any { return []any{f(1, 1, 2, 4), opDecode(), opAttn} },
		"AttentionLSE":             func() []any { return []any{f(2, 2, 4), f(2, 2), opAttnInputs(), opAttn} },
		"ClipGradNorm":             func() []any { return []any{[]*tensor.Tensor{f(2, 3), f(4)}, 0.5} },
		"Embedding":                func() []any { return []any{f(2, 3), f(4, 3), ids(3, 0)} },
		"EmbeddingBackward":        func() []any { return []any{f(4, 3), opEmbGrad()} },
		"GradNorm":                 func() []any { return []any{[]*tensor.Tensor{f(2, 3), f(4)}} },
		"KVCacheWrite":             func() []any { return []any{f(1, 3, 1, 4), f(1, 1, 1, 4), ids(2)} },
		"LMHeadBackward":           func() []any { return []any{f(2, 3), f(4, 3), opLMGrad()} },
		"LMHeadLogProbs":           func() []any { return []any{f(2), f(2), opLMInputs()} },
		"LayerNorm":                func() []any { return []any{f(2, 3), f(2, 3), f(3), f(3), 1e-5} },
		"LayerNormBackward":        func() []any { return []any{f(2, 3), f(3), f(3), opNormGrad()} },
		"LayerNormStats":           func() []any { return []any{f(2, 3), f(2), f(2), f(2, 3), f(3), f(3), 1e-5} },
		"Linear":                   func() []any { return []any{f(2, 4), f(2, 3), opWeight()} },
		"LinearBackward":           func() []any { return []any{opLinearGradOut(), opLinearGrad()} },
		"LinearBias":               func() []any { return []any{f(2, 4), f(2, 3), opWeight(), f(4)} },
		"MatMul":                   func() []any { return []any{f(2, 4), f(2, 3), f(3, 4), tensor.MatMulOptions{}} },
		"PackWeight":               func() []any { return []any{f(4, 3)} },
		"PackedWeight.Repack":      func() []any { return []any{opWeight()} },
		"PackedWeight.Row":         func() []any { return []any{opWeight(), 1, make([]float32, 3)} },
		"ParseActivation":          func() []any { return []any{"silu"} },
		"RMSNorm":                  func() []any { return []any{f(2, 3), f(2, 3), f(3), 1e-6} },
		"RMSNormBackward":          func() []any { return []any{f(2, 3), f(3), opNormGrad()} },
		"RMSNormStats":             func() []any { return []any{f(2, 3), f(2), f(2, 3), f(3), 1e-6} },
		"RoPE":                     func() []any { return []any{f(2, 3, 4), f(2, 3, 4), ids(0, 5), opRoPE} },
		"RoPEBackward":             func() []any { return []any{f(2, 3, 4), opRoPEGrad()} },
		"SwiGLU":                   func() []any { return []any{f(2, 3), f(2, 3), f(2, 3)} },
		"SwiGLUBackward":           func() []any { return []any{f(2, 3), f(2, 3), opSwiGLUGrad()} },
		"Axpby":                    func() []any { return []any{f(2, 3), f(2, 3), float32(0.5), float32(1)} },
		"Mul":                      func() []any { return []any{f(2, 3), f(2, 3), f(2, 3)} },
	}
}

// TestHostileInputs: no exported function of tensor panics, whatever its arguments; every
// error is a *tensor.Error.
func TestHostileInputs(t *testing.T) {
	funcs := tensorFuncs()
	hostile.Covered(t, ".", funcs, map[string]string{
		"Must": "documented to panic on error: it is for tests and examples with literal inputs",
	})
	// Errorf builds errors of any kind, and Unwrap returns that kind: they are called
	// without the *tensor.Error requirement.
	plain := map[string]any{}
	for _, name := range []string{"Errorf", "Error.Unwrap"} {
		plain[name] = funcs[name]
		delete(funcs, name)
	}
	v := tensorValues()
	hostile.Check(t, funcs, v, hostile.Options{TensorErrors: true, Valid: opValid()})
	hostile.Check(t, plain, v, hostile.Options{})
}
