package hfmodel

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nlpodyssey/safetensors"

	"github.com/mtrl-go/mtrl/tensor"
)

// File names of a Hugging Face checkpoint directory.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
	SingleWeightsFile    = "model.safetensors"
	WeightsIndexFile     = "model.safetensors.index.json"
)

// TensorSpec is the name and shape of one weight a config implies.
type TensorSpec struct {
	Name  string
	Shape []int
}

// ExpectedTensors lists the weights of the model c describes, named and ordered as Hugging
// Face's state_dict (Qwen2ForCausalLM, LlamaForCausalLM): embeddings, then per layer the
// attention projections, the MLP and the two norms, then the final norm and, unless the
// embeddings are tied, lm_head.
func ExpectedTensors(c *Config) []TensorSpec {
	H, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	q, kv := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{V, H}}}
	add := func(name string, shape ...int) { specs = append(specs, TensorSpec{name, shape}) }
	for l := 0; l < c.NumHiddenLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, proj := range []struct {
			name    string
			out, in int
			hasBias bool
		}{
			{"self_attn.q_proj", q, H, c.AttentionBias},
			{"self_attn.k_proj", kv, H, c.AttentionBias},
			{"self_attn.v_proj", kv, H, c.AttentionBias},
			{"self_attn.o_proj", H, q, c.AttentionBias && c.Architecture == ArchLlama},
			{"mlp.gate_proj", I, H, c.MLPBias},
			{"mlp.up_proj", I, H, c.MLPBias},
			{"mlp.down_proj", H, I, c.MLPBias},
		} {
			add(p+proj.name+".weight", proj.out, proj.in)
			if proj.hasBias {
				add(p+proj.name+".bias", proj.out)
			}
		}
		add(p+"input_layernorm.weight", H)
		add(p+"post_attention_layernorm.weight", H)
	}
	add("model.norm.weight", H)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", V, H)
	}
	return specs
}

// Checkpoint is an opened checkpoint directory: its configs and its weights, memory-mapped.
type Checkpoint struct {
	Config     *Config
	Generation *GenerationConfig // nil when the directory has no generation_config.json
	Tensors    []*Tensor         // in ExpectedTensors order

	byName map[string]*Tensor
	unmap  []func() error
}

// Tensor returns the weight named as Hugging Face names it, or nil.
func (c *Checkpoint) Tensor(name string) *Tensor { return c.byName[name] }

// Close unmaps the weight files; the Data of every tensor read from them is invalid afterwards.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.unmap {
		errs = append(errs, f())
	}
	c.unmap = nil
	return errors.Join(errs...)
}

// NewCheckpoint assembles a checkpoint from a config and its weights (in any order), checking
// them as Open does.
func NewCheckpoint(cfg *Config, gen *GenerationConfig, tensors []*Tensor) (*Checkpoint, error) {
	byName := map[string]*Tensor{}
	for _, t := range tensors {
		if _, dup := byName[t.Name]; dup {
			return nil, tensor.Errorf(tensor.ErrParam, "hfmodel.NewCheckpoint", t.Name, "tensor given twice")
		}
		byName[t.Name] = t
	}
	ck := &Checkpoint{Config: cfg, Generation: gen}
	if err := ck.setTensors(byName, "hfmodel.NewCheckpoint"); err != nil {
		return nil, err
	}
	return ck, nil
}

// setTensors checks that the weights are exactly those the config implies, with their shapes,
// and orders them.
func (c *Checkpoint) setTensors(byName map[string]*Tensor, op string) error {
	specs := ExpectedTensors(c.Config)
	c.Tensors = make([]*Tensor, 0, len(specs))
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Name] = true
		t := byName[s.Name]
		if t == nil {
			return tensor.Errorf(tensor.ErrShape, op, s.Name, "missing from the weights (config %s: %d layers, tie_word_embeddings %v)", c.Config.Architecture, c.Config.NumHiddenLayers, c.Config.TieWordEmbeddings)
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return tensor.Errorf(tensor.ErrShape, op, s.Name, "has shape %v, config.json implies %v", t.Shape, s.Shape)
		}
		c.Tensors = append(c.Tensors, t)
	}
	for _, name := range sortedKeys(byName) {
		if !want[name] {
			return tensor.Errorf(tensor.ErrShape, op, name, "unexpected tensor for %s (tie_word_embeddings %v, attention_bias %v, mlp_bias %v)", c.Config.Architecture, c.Config.TieWordEmbeddings, c.Config.AttentionBias, c.Config.MLPBias)
		}
	}
	c.byName = byName
	return nil
}

// Open reads config.json, generation_config.json if present, and the weights: model.safetensors,
// or the shards model.safetensors.index.json lists. The weight files are memory-mapped, not
// read; Close unmaps them. Every tensor must be one the config implies, with its shape, stored
// as float32, bfloat16 or float16.
func Open(dir string) (*Checkpoint, error) {
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := OpenWeights(dir)
	if err != nil {
		return nil, err
	}
	ck.Generation = gen
	return ck, nil
}

// OpenWeights is Open without generation_config.json: it reads only config.json and the
// weights (Generation is nil).
func OpenWeights(dir string) (*Checkpoint, error) {
	const op = "hfmodel.Open"
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Config: cfg}
	byName, err := ck.mapWeights(dir)
	if err == nil {
		err = ck.setTensors(byName, op)
	}
	if err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// mapWeights maps the weight files and returns their tensors by name.
func (c *Checkpoint) mapWeights(dir string) (map[string]*Tensor, error) {
	const op = "hfmodel.Open"
	files := []string{SingleWeightsFile}
	var weightMap map[string]string
	index, err := os.ReadFile(filepath.Join(dir, WeightsIndexFile))
	switch {
	case err == nil:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(index, &idx); err != nil || len(idx.WeightMap) == 0 {
			return nil, tensor.Errorf(tensor.ErrParam, op, WeightsIndexFile, "needs a non-empty weight_map object (%v)", err)
		}
		weightMap = idx.WeightMap
		seen := map[string]bool{}
		files = files[:0]
		for _, name := range sortedKeys(weightMap) {
			f := weightMap[name]
			if f != filepath.Base(f) || !strings.HasSuffix(f, ".safetensors") {
				return nil, tensor.Errorf(tensor.ErrParam, op, WeightsIndexFile, "tensor %q maps to %q, not a .safetensors file in the directory", name, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		sort.Strings(files)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, tensor.Errorf(tensor.ErrParam, op, WeightsIndexFile, "%v", err)
	}
	byName := map[string]*Tensor{}
	for _, f := range files {
		data, unmap, err := mapFile(filepath.Join(dir, f))
		if err != nil {
			if weightMap == nil && errors.Is(err, fs.ErrNotExist) {
				return nil, tensor.Errorf(tensor.ErrParam, op, f, "the directory has neither %s nor %s", SingleWeightsFile, WeightsIndexFile)
			}
			return nil, tensor.Errorf(tensor.ErrParam, op, f, "%v", err)
		}
		c.unmap = append(c.unmap, unmap)
		st, err := safetensors.Deserialize(data)
		if err != nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, f, "not a valid safetensors file: %v", err)
		}
		for _, nt := range st.Tensors() {
			dt, ok := fromSafetensors(nt.TensorView.DType())
			if !ok {
				return nil, tensor.Errorf(tensor.ErrDType, op, nt.Name, "%s stores it as %s; only F32, BF16 and F16 are supported", f, nt.TensorView.DType())
			}
			if weightMap != nil && weightMap[nt.Name] != f {
				return nil, tensor.Errorf(tensor.ErrParam, op, nt.Name, "found in %s but %s maps it to %q", f, WeightsIndexFile, weightMap[nt.Name])
			}
			if _, dup := byName[nt.Name]; dup {
				return nil, tensor.Errorf(tensor.ErrParam, op, nt.Name, "stored twice")
			}
			shape := make([]int, len(nt.TensorView.Shape()))
			for i, d := range nt.TensorView.Shape() {
				shape[i] = int(d)
			}
			byName[nt.Name] = &Tensor{Name: nt.Name, DType: dt, Shape: shape, Data: nt.TensorView.Data()}
		}
	}
	for name, f := range weightMap {
		if byName[name] == nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, name, "%s maps it to %s, which does not hold it", WeightsIndexFile, f)
		}
	}
	return byName, nil
}

// SaveOptions says how Save writes the weights.
type SaveOptions struct {
	DType  DType // every tensor is stored as this type; config.json's torch_dtype says it
	Shards int   // 1: model.safetensors; K > 1: model-0000i-of-0000K.safetensors and the index
	// MaxShardSize > 0 replaces Shards: as transformers' save_pretrained(max_shard_size) does,
	// the tensors go, in state_dict order, into a shard until the next one would pass
	// MaxShardSize bytes, and a tensor larger than that gets a shard of its own.
	MaxShardSize int64
}

// Save writes config.json, generation_config.json (when the checkpoint has one) and the weights
// into dir (created if needed) in Hugging Face's layout. Shards split the weights in state_dict
// order into K contiguous non-empty files, cut where the running size passes a multiple of
// total/K (a large tensor such as the embeddings fills a shard alone).
func (c *Checkpoint) Save(dir string, opt SaveOptions) error {
	const op = "hfmodel.Checkpoint.Save"
	if _, err := ParseDType(opt.DType.String()); err != nil {
		return tensor.Errorf(tensor.ErrDType, op, "DType", "%v is not Float32, BFloat16 or Float16", opt.DType)
	}
	if opt.MaxShardSize == 0 && (opt.Shards < 1 || opt.Shards > len(c.Tensors)) {
		return tensor.Errorf(tensor.ErrParam, op, "Shards", "%d must be between 1 and the number of tensors, %d", opt.Shards, len(c.Tensors))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, "dir", "%v", err)
	}
	cfg := *c.Config
	cfg.TorchDType = opt.DType.String()
	files := map[string][]byte{}
	var err error
	if files[ConfigFile], err = cfg.MarshalJSON(); err != nil {
		return err
	}
	if c.Generation != nil {
		if files[GenerationConfigFile], err = c.Generation.MarshalJSON(); err != nil {
			return err
		}
	}
	tensors := make([]*Tensor, len(c.Tensors))
	for i, t := range c.Tensors {
		if tensors[i], err = t.convert(opt.DType); err != nil {
			return err
		}
	}
	var shards [][]*Tensor
	switch {
	case opt.MaxShardSize < 0:
		return tensor.Errorf(tensor.ErrParam, op, "MaxShardSize", "is %d, want > 0 (or 0: Shards)", opt.MaxShardSize)
	case opt.MaxShardSize > 0:
		shards = splitBySize(tensors, opt.MaxShardSize)
	default:
		shards = splitShards(tensors, opt.Shards)
	}
	names := make([]string, len(shards))
	if len(shards) == 1 {
		names[0] = SingleWeightsFile
	} else {
		weightMap := map[string]string{}
		total := 0
		for i, sh := range shards {
			names[i] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
			for _, t := range sh {
				weightMap[t.Name] = names[i]
				total += len(t.Data)
			}
		}
		index := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
		if files[WeightsIndexFile], err = marshalIndent(index); err != nil {
			return err
		}
	} // a stale index would point Open at shards of another save
	if len(shards) == 1 {
		if err := os.Remove(filepath.Join(dir, WeightsIndexFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return tensor.Errorf(tensor.ErrParam, op, WeightsIndexFile, "%v", err)
		}
	}
	for i, sh := range shards {
		if err := writeSafetensors(filepath.Join(dir, names[i]), sh); err != nil {
			return tensor.Errorf(tensor.ErrParam, op, names[i], "%v", err)
		}
	}
	for _, name := range sortedKeys(files) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return tensor.Errorf(tensor.ErrParam, op, name, "%v", err)
		}
	}
	return nil
}

// splitShards cuts the tensors, in order, into k non-empty runs, closing a run where the
// running size passes a multiple of total/k.
func splitShards(ts []*Tensor, k int) [][]*Tensor {
	total := 0
	for _, t := range ts {
		total += len(t.Data)
	}
	shards := make([][]*Tensor, 0, k)
	var cur []*Tensor
	before := 0 // bytes in closed shards and cur
	for i, t := range ts {
		s := len(shards) // index of cur
		left := len(ts) - i
		// Close cur when this tensor's middle lies past cur's share of the total, or when
		// every remaining tensor is needed to give each remaining shard one.
		if len(cur) > 0 && s < k-1 && ((before+len(t.Data)/2)*k > total*(s+1) || left == k-1-s) {
			shards = append(shards, cur)
			cur = nil
		}
		cur = append(cur, t)
		before += len(t.Data)
	}
	return append(shards, cur)
}

// splitBySize cuts the tensors, in order, into shards of at most max bytes of data (a larger
// tensor alone), closing a shard when the next tensor would pass max.
func splitBySize(ts []*Tensor, max int64) [][]*Tensor {
	var shards [][]*Tensor
	var cur []*Tensor
	var size int64
	for _, t := range ts {
		n := int64(len(t.Data))
		if n > max {
			shards = append(shards, []*Tensor{t})
			continue
		}
		if len(cur) > 0 && size+n > max {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += n
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	return shards
}

// stView is a tensor as github.com/nlpodyssey/safetensors serializes it.
type stView struct{ t *Tensor }

func (v stView) DType() safetensors.DType { return v.t.DType.safetensors() }
func (v stView) Shape() []uint64 {
	s := make([]uint64, len(v.t.Shape))
	for i, d := range v.t.Shape {
		s[i] = uint64(d)
	}
	return s
}
func (v stView) Data() []byte    { return v.t.Data }
func (v stView) DataLen() uint64 { return uint64(len(v.t.Data)) }

// writeSafetensors writes one file as the safetensors library does (header sorted by dtype
// then name, padded to 8 bytes, metadata {"format": "pt"} as PyTorch's save_file writes it),
// through a temporary file renamed into place.
func writeSafetensors(path string, ts []*Tensor) error {
	views := make(map[string]stView, len(ts))
	for _, t := range ts {
		views[t.Name] = stView{t}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err := safetensors.SerializeToWriter(views, map[string]string{"format": "pt"}, w); err != nil {
		tmp.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
