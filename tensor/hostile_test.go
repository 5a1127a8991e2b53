package tensor_test

import (
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
	return map[string]any{
		"BF16.Float32":           tensor.BF16.Float32,
		"BF16FromFloat32":        tensor.BF16FromFloat32,
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
	}
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
	return v
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
	hostile.Check(t, funcs, v, hostile.Options{TensorErrors: true})
	hostile.Check(t, plain, v, hostile.Options{})
}
