package hfmodel

import (
	"os"
	"sort"

	"github.com/nlpodyssey/safetensors"

	"github.com/mtrl-go/mtrl/tensor"
)

// WriteSafetensors writes tensors into one safetensors file as Save writes each shard (a PEFT
// adapter_model.safetensors, for instance).
func WriteSafetensors(path string, ts []*Tensor) error { return writeSafetensors(path, ts) }

// ReadSafetensors reads a whole safetensors file into memory (not mapped), its tensors sorted
// by name; F32, BF16 and F16 only.
func ReadSafetensors(path string) ([]*Tensor, error) {
	const op = "hfmodel.ReadSafetensors"
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, path, "%v", err)
	}
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, path, "not a valid safetensors file: %v", err)
	}
	var out []*Tensor
	for _, nt := range st.Tensors() {
		dt, ok := fromSafetensors(nt.TensorView.DType())
		if !ok {
			return nil, tensor.Errorf(tensor.ErrDType, op, nt.Name, "stored as %s; only F32, BF16 and F16 are supported", nt.TensorView.DType())
		}
		shape := make([]int, len(nt.TensorView.Shape()))
		for i, d := range nt.TensorView.Shape() {
			shape[i] = int(d)
		}
		out = append(out, &Tensor{Name: nt.Name, DType: dt, Shape: shape, Data: nt.TensorView.Data()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// MapTensors memory-maps the weight files of dir (model.safetensors, or the shards
// model.safetensors.index.json lists) and returns every tensor they hold by name, unchecked
// against any config, with the function that unmaps them: the loader of architectures whose
// weights ExpectedTensors does not list (Qwen2-VL's vision tower).
func MapTensors(dir string) (map[string]*Tensor, func() error, error) {
	ck := &Checkpoint{}
	byName, err := ck.mapWeights(dir)
	if err != nil {
		ck.Close()
		return nil, nil, err
	}
	return byName, ck.Close, nil
}
