package hfmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/mtrl-go/mtrl/tensor"
)

// Architectures this package reads, as config.json's "architectures" names them.
const (
	ArchQwen2 = "Qwen2ForCausalLM"
	ArchLlama = "LlamaForCausalLM"
)

// Config is config.json of a Qwen2 or Llama causal language model: the fields the model needs,
// with Hugging Face's defaults filled in where the file omits them.
type Config struct {
	Architecture          string // ArchQwen2 or ArchLlama
	ModelType             string // "qwen2" or "llama"
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int // grouped-query attention; defaults to NumAttentionHeads
	HeadDim               int // defaults to HiddenSize / NumAttentionHeads
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling // nil: plain RoPE
	TieWordEmbeddings     bool         // lm_head shares model.embed_tokens.weight
	// AttentionBias: q/k/v (and, for Llama, o) projections have biases. Qwen2 always has q/k/v
	// biases and no o bias; Llama reads "attention_bias".
	AttentionBias bool
	MLPBias       bool // Llama's "mlp_bias": gate/up/down projections have biases
	HiddenAct     string
	// InitializerRange is the standard deviation Hugging Face initialises weights with.
	InitializerRange float64
	TorchDType       string // "float32", "bfloat16" or "float16": the dtype the weights were saved in
	BOSTokenID       *int
	EOSTokenIDs      []int // "eos_token_id", one id or a list
	PadTokenID       *int

	// Extra holds the keys kept verbatim for export that do not change the computation
	// (transformers_version, use_cache, sliding_window while use_sliding_window is false, …).
	Extra map[string]json.RawMessage
}

// RopeScaling is config.json's "rope_scaling": linear position interpolation or Llama 3's
// frequency-dependent scaling.
type RopeScaling struct {
	Type   string  // "linear" or "llama3"
	Factor float64 // both
	// llama3 only
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// passthroughKeys are the config.json keys kept verbatim in Config.Extra: they do not change the
// computation, or are checked below to have the one value this package implements.
var passthroughKeys = map[string]bool{
	// bookkeeping that does not change the model
	"_name_or_path": true, "transformers_version": true, "use_cache": true,
	"output_attentions": true, "output_hidden_states": true, "return_dict": true,
	"attention_dropout": true, // checked to be 0 below
	// Qwen2's sliding window, checked to be off below
	"sliding_window": true, "max_window_layers": true, "use_sliding_window": true,
	"pretraining_tp": true, // Llama, checked to be 1 below
	"layer_types":    true, // newer Qwen2 configs: checked to be all full attention below
}

var parsedKeys = map[string]bool{
	"architectures": true, "model_type": true, "vocab_size": true, "hidden_size": true,
	"intermediate_size": true, "num_hidden_layers": true, "num_attention_heads": true,
	"num_key_value_heads": true, "head_dim": true, "max_position_embeddings": true,
	"rms_norm_eps": true, "rope_theta": true, "rope_scaling": true, "tie_word_embeddings": true,
	"attention_bias": true, "mlp_bias": true, "hidden_act": true, "initializer_range": true,
	"torch_dtype": true, "dtype": true, "bos_token_id": true, "eos_token_id": true,
	"pad_token_id": true,
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "hfmodel.LoadConfig", "config.json", "%v", err)
	}
	return ParseConfig(data)
}

// ParseConfig parses the contents of a config.json. Every key is either used, kept verbatim
// (Config.Extra) because it does not change the computation, or an error naming it.
func ParseConfig(data []byte) (*Config, error) {
	const op = "hfmodel.ParseConfig"
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "config.json", "not a JSON object: %v", err)
	}
	c := &Config{Extra: map[string]json.RawMessage{}}
	for _, k := range sortedKeys(raw) {
		switch {
		case parsedKeys[k]:
		case passthroughKeys[k]:
			c.Extra[k] = raw[k]
		default:
			return nil, tensor.Errorf(tensor.ErrParam, op, k, "config.json key %q is not supported by this implementation", k)
		}
	}
	get := func(key string, dst any) error {
		v, ok := raw[key]
		if !ok || string(v) == "null" {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return tensor.Errorf(tensor.ErrParam, op, key, "%s: %v", v, err)
		}
		return nil
	}
	var archs []string
	if err := get("architectures", &archs); err != nil {
		return nil, err
	}
	if len(archs) != 1 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "architectures", "want exactly one of %s, %s; got %q", ArchQwen2, ArchLlama, archs)
	}
	c.Architecture = archs[0]
	wantType := map[string]string{ArchQwen2: "qwen2", ArchLlama: "llama"}[c.Architecture]
	if wantType == "" {
		return nil, tensor.Errorf(tensor.ErrParam, op, "architectures", "architecture %q is not supported (want %s or %s)", c.Architecture, ArchQwen2, ArchLlama)
	}
	if err := get("model_type", &c.ModelType); err != nil {
		return nil, err
	}
	if c.ModelType != wantType {
		return nil, tensor.Errorf(tensor.ErrParam, op, "model_type", "%q does not match architecture %s (want %q)", c.ModelType, c.Architecture, wantType)
	}
	ints := []struct {
		key string
		dst *int
	}{
		{"vocab_size", &c.VocabSize}, {"hidden_size", &c.HiddenSize},
		{"intermediate_size", &c.IntermediateSize}, {"num_hidden_layers", &c.NumHiddenLayers},
		{"num_attention_heads", &c.NumAttentionHeads}, {"max_position_embeddings", &c.MaxPositionEmbeddings},
	}
	for _, f := range ints {
		if _, ok := raw[f.key]; !ok {
			return nil, tensor.Errorf(tensor.ErrParam, op, f.key, "missing")
		}
		if err := get(f.key, f.dst); err != nil {
			return nil, err
		}
		if *f.dst <= 0 {
			return nil, tensor.Errorf(tensor.ErrParam, op, f.key, "must be positive, got %d", *f.dst)
		}
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	if err := get("num_key_value_heads", &c.NumKeyValueHeads); err != nil {
		return nil, err
	}
	if c.NumKeyValueHeads <= 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "num_key_value_heads", "%d must be positive and divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HiddenSize%c.NumAttentionHeads == 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if err := get("head_dim", &c.HeadDim); err != nil {
		return nil, err
	}
	if c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "head_dim", "%d must be positive and even (hidden_size %d, num_attention_heads %d)", c.HeadDim, c.HiddenSize, c.NumAttentionHeads)
	}
	c.RMSNormEps = 1e-6
	if err := get("rms_norm_eps", &c.RMSNormEps); err != nil {
		return nil, err
	}
	c.RopeTheta = 10000
	if err := get("rope_theta", &c.RopeTheta); err != nil {
		return nil, err
	}
	if !(c.RMSNormEps > 0) || !(c.RopeTheta > 0) {
		return nil, tensor.Errorf(tensor.ErrParam, op, "rms_norm_eps/rope_theta", "must be positive, got %g and %g", c.RMSNormEps, c.RopeTheta)
	}
	if err := parseRopeScaling(raw["rope_scaling"], c); err != nil {
		return nil, err
	}
	if err := get("tie_word_embeddings", &c.TieWordEmbeddings); err != nil {
		return nil, err
	}
	c.HiddenAct = "silu"
	if err := get("hidden_act", &c.HiddenAct); err != nil {
		return nil, err
	}
	if c.HiddenAct != "silu" {
		return nil, tensor.Errorf(tensor.ErrParam, op, "hidden_act", "%q is not supported (only silu)", c.HiddenAct)
	}
	c.InitializerRange = 0.02
	if err := get("initializer_range", &c.InitializerRange); err != nil {
		return nil, err
	}
	if c.Architecture == ArchQwen2 {
		c.AttentionBias = true
		for _, k := range []string{"attention_bias", "mlp_bias", "pretraining_tp"} {
			if _, ok := raw[k]; ok {
				return nil, tensor.Errorf(tensor.ErrParam, op, k, "is a Llama key, not supported with %s", ArchQwen2)
			}
		}
		var sliding bool
		if err := get("use_sliding_window", &sliding); err != nil {
			return nil, err
		}
		if sliding {
			return nil, tensor.Errorf(tensor.ErrParam, op, "use_sliding_window", "sliding-window attention is not supported")
		}
		var layerTypes []string
		if err := get("layer_types", &layerTypes); err != nil {
			return nil, err
		}
		for i, t := range layerTypes {
			if t != "full_attention" {
				return nil, tensor.Errorf(tensor.ErrParam, op, "layer_types", "layer %d is %q; only full_attention is supported", i, t)
			}
		}
	} else {
		for _, k := range []string{"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"} {
			if _, ok := raw[k]; ok {
				return nil, tensor.Errorf(tensor.ErrParam, op, k, "is a Qwen2 key, not supported with %s", ArchLlama)
			}
		}
		if err := get("attention_bias", &c.AttentionBias); err != nil {
			return nil, err
		}
		if err := get("mlp_bias", &c.MLPBias); err != nil {
			return nil, err
		}
		tp := 1
		if err := get("pretraining_tp", &tp); err != nil {
			return nil, err
		}
		if tp != 1 {
			return nil, tensor.Errorf(tensor.ErrParam, op, "pretraining_tp", "%d is not supported (only 1)", tp)
		}
	}
	var dropout float64
	if err := get("attention_dropout", &dropout); err != nil {
		return nil, err
	}
	if dropout != 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "attention_dropout", "%g is not supported (only 0)", dropout)
	}
	c.TorchDType = "float32"
	for _, k := range []string{"torch_dtype", "dtype"} { // transformers ≥ 4.56 writes "dtype"
		if err := get(k, &c.TorchDType); err != nil {
			return nil, err
		}
	}
	if _, err := ParseDType(c.TorchDType); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "torch_dtype", "%q is not supported (float32, bfloat16, float16)", c.TorchDType)
	}
	for _, f := range []struct {
		key string
		dst **int
	}{{"bos_token_id", &c.BOSTokenID}, {"pad_token_id", &c.PadTokenID}} {
		if err := get(f.key, f.dst); err != nil {
			return nil, err
		}
	}
	ids, err := intOrList(raw["eos_token_id"])
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "eos_token_id", "%v", err)
	}
	c.EOSTokenIDs = ids
	return c, nil
}

func parseRopeScaling(v json.RawMessage, c *Config) error {
	const op = "hfmodel.ParseConfig"
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "%s: %v", v, err)
	}
	var typ, typ2 string
	json.Unmarshal(m["rope_type"], &typ)
	json.Unmarshal(m["type"], &typ2) // the older spelling
	if typ == "" {
		typ = typ2
	}
	allowed := map[string][]string{
		"default": {},
		"linear":  {"factor"},
		"llama3":  {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
	}[typ]
	if allowed == nil {
		return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "rope type %q is not supported (null, linear or llama3)", typ)
	}
	for k := range m {
		if k != "rope_type" && k != "type" && !slices.Contains(allowed, k) {
			return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "key %q is not supported with rope type %q", k, typ)
		}
	}
	if typ == "default" {
		return nil
	}
	for _, k := range allowed {
		if _, ok := m[k]; !ok {
			return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "rope type %q needs %q", typ, k)
		}
	}
	rs := &RopeScaling{Type: typ}
	json.Unmarshal(m["factor"], &rs.Factor)
	if typ == "llama3" {
		json.Unmarshal(m["low_freq_factor"], &rs.LowFreqFactor)
		json.Unmarshal(m["high_freq_factor"], &rs.HighFreqFactor)
		if err := json.Unmarshal(m["original_max_position_embeddings"], &rs.OriginalMaxPositionEmbeddings); err != nil || rs.OriginalMaxPositionEmbeddings <= 0 {
			return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "original_max_position_embeddings must be a positive integer")
		}
		if !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) {
			return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "llama3 needs 0 < low_freq_factor < high_freq_factor, got %g, %g", rs.LowFreqFactor, rs.HighFreqFactor)
		}
	}
	if !(rs.Factor >= 1) || math.IsInf(rs.Factor, 0) {
		return tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "factor must be ≥ 1, got %g", rs.Factor)
	}
	c.RopeScaling = rs
	return nil
}

// MarshalJSON writes the config as transformers' save_pretrained does: every key, sorted, indented
// by two spaces.
func (c *Config) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range c.Extra {
		m[k] = v
	}
	m["architectures"] = []string{c.Architecture}
	m["model_type"] = c.ModelType
	m["vocab_size"] = c.VocabSize
	m["hidden_size"] = c.HiddenSize
	m["intermediate_size"] = c.IntermediateSize
	m["num_hidden_layers"] = c.NumHiddenLayers
	m["num_attention_heads"] = c.NumAttentionHeads
	m["num_key_value_heads"] = c.NumKeyValueHeads
	m["head_dim"] = c.HeadDim
	m["max_position_embeddings"] = c.MaxPositionEmbeddings
	m["rms_norm_eps"] = c.RMSNormEps
	m["rope_theta"] = c.RopeTheta
	m["tie_word_embeddings"] = c.TieWordEmbeddings
	m["hidden_act"] = c.HiddenAct
	m["initializer_range"] = c.InitializerRange
	m["torch_dtype"] = c.TorchDType
	if c.Architecture == ArchLlama {
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = c.MLPBias
	}
	if c.RopeScaling == nil {
		m["rope_scaling"] = nil
	} else {
		rs := map[string]any{"rope_type": c.RopeScaling.Type, "factor": c.RopeScaling.Factor}
		if c.RopeScaling.Type == "llama3" {
			rs["low_freq_factor"] = c.RopeScaling.LowFreqFactor
			rs["high_freq_factor"] = c.RopeScaling.HighFreqFactor
			rs["original_max_position_embeddings"] = c.RopeScaling.OriginalMaxPositionEmbeddings
		}
		m["rope_scaling"] = rs
	}
	if c.BOSTokenID != nil {
		m["bos_token_id"] = *c.BOSTokenID
	}
	if c.PadTokenID != nil {
		m["pad_token_id"] = *c.PadTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		m["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		m["eos_token_id"] = c.EOSTokenIDs
	}
	return marshalIndent(m)
}

// marshalIndent writes v as Python's json.dumps(v, indent=2, sort_keys=True) does for the
// values here (Go's encoder sorts map keys), with a final newline.
func marshalIndent(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// intOrList reads a token id that may be a number, a list of numbers or absent.
func intOrList(v json.RawMessage) ([]int, error) {
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(v, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(v, &many); err != nil {
		return nil, fmt.Errorf("%s is neither an integer nor a list of integers", v)
	}
	return many, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
