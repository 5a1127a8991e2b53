package qwenvl

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/tensor"
)

// Variants: the two model families this package runs.
const (
	Qwen2VL  = "qwen2_vl"
	Qwen25VL = "qwen2_5_vl"
)

var variantArch = map[string]string{
	Qwen2VL:  "Qwen2VLForConditionalGeneration",
	Qwen25VL: "Qwen2_5_VLForConditionalGeneration",
}

// VisionConfig is vision_config of a Qwen2-VL or Qwen2.5-VL config.json, under one set of
// names: Qwen2-VL's embed_dim, mlp_ratio and hidden_size (the merger's output) are Dim,
// MLPDim = Dim·mlp_ratio and OutDim; Qwen2.5-VL's hidden_size, intermediate_size and
// out_hidden_size are Dim, MLPDim and OutDim.
type VisionConfig struct {
	Depth, Dim, Heads, MLPDim, OutDim int
	InChannels, PatchSize             int
	TemporalPatchSize, MergeSize      int
	Act                               tensor.Activation // quick_gelu (Qwen2-VL) or silu (Qwen2.5-VL, gated)
	// Qwen2.5-VL's window attention: WindowSize pixels a side, and the blocks that attend
	// over the whole image instead. WindowSize 0 (Qwen2-VL) means every block attends fully.
	WindowSize      int
	FullAttBlocks   []int
	TokensPerSecond int
}

// HeadDim is the vision attention's head size.
func (v VisionConfig) HeadDim() int { return v.Dim / v.Heads }

// PatchDim is the length of one pixel_values row: channels · temporal patch · patch².
func (v VisionConfig) PatchDim() int {
	return v.InChannels * v.TemporalPatchSize * v.PatchSize * v.PatchSize
}

// Config is config.json of a Qwen2-VL or Qwen2.5-VL checkpoint: the language model as an
// hfmodel.Config (Qwen2; its keys at the top level, or under text_config as newer transformers
// writes them), M-RoPE's mrope_section, the vision tower and the special tokens.
type Config struct {
	Variant      string // Qwen2VL or Qwen25VL
	Text         *hfmodel.Config
	MRoPESection []int // sums to the LM's head_dim/2
	Vision       VisionConfig
	Tokens       VisionTokens
	VisionEndID  int64

	raw map[string]json.RawMessage // the file, for Save
}

// vlKeys are the top-level keys of a VL config.json that are not the language model's.
var vlKeys = map[string]bool{
	"vision_config": true, "text_config": true, "rope_scaling": true, "rope_parameters": true, "image_token_id": true,
	"video_token_id": true, "vision_start_token_id": true, "vision_end_token_id": true,
	"vision_token_id": true, "architectures": true, "model_type": true,
}

// textKeys are the language model's keys, passed to hfmodel.ParseConfig.
var textKeys = map[string]bool{
	"vocab_size": true, "hidden_size": true, "intermediate_size": true, "num_hidden_layers": true,
	"num_attention_heads": true, "num_key_value_heads": true, "max_position_embeddings": true,
	"rms_norm_eps": true, "rope_theta": true, "tie_word_embeddings": true, "hidden_act": true,
	"initializer_range": true, "torch_dtype": true, "dtype": true, "bos_token_id": true,
	"eos_token_id": true, "pad_token_id": true, "attention_dropout": true, "sliding_window": true,
	"max_window_layers": true, "use_sliding_window": true, "use_cache": true, "layer_types": true,
	"_name_or_path": true, "transformers_version": true, "output_attentions": true,
	"output_hidden_states": true, "return_dict": true,
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, hfmodel.ConfigFile))
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadConfig", "config.json", "%v", err)
	}
	return ParseConfig(data)
}

// IsVLConfig reports whether a config.json is a Qwen2-VL or Qwen2.5-VL one (by model_type).
func IsVLConfig(data []byte) bool {
	var c struct {
		ModelType string `json:"model_type"`
	}
	return json.Unmarshal(data, &c) == nil && variantArch[c.ModelType] != ""
}

// ParseConfig parses a Qwen2-VL or Qwen2.5-VL config.json. As hfmodel.ParseConfig, a key it
// neither uses nor knows to be inert is an error naming it.
func ParseConfig(data []byte) (*Config, error) {
	const op = "qwenvl.ParseConfig"
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "config.json", "not a JSON object: %v", err)
	}
	c := &Config{raw: raw}
	if err := json.Unmarshal(raw["model_type"], &c.Variant); err != nil || variantArch[c.Variant] == "" {
		return nil, tensor.Errorf(tensor.ErrParam, op, "model_type", "%s: want %q or %q", raw["model_type"], Qwen2VL, Qwen25VL)
	}
	var archs []string
	if err := json.Unmarshal(raw["architectures"], &archs); err != nil || len(archs) != 1 || archs[0] != variantArch[c.Variant] {
		return nil, tensor.Errorf(tensor.ErrParam, op, "architectures", "%s: want [%q] for model_type %s", raw["architectures"], variantArch[c.Variant], c.Variant)
	}
	// The language model's keys: text_config's (newer transformers, which may repeat some at the
	// top level), else the top level's.
	text := map[string]json.RawMessage{}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		switch {
		case vlKeys[k]:
		case textKeys[k]:
			text[k] = raw[k]
		default:
			return nil, tensor.Errorf(tensor.ErrParam, op, k, "config.json key %q is not supported by this implementation", k)
		}
	}
	rope := raw["rope_scaling"]
	if r, ok := raw["rope_parameters"]; ok { // transformers 5's name
		rope = r
	}
	if tc, ok := raw["text_config"]; ok {
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(tc, &sub); err != nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, "text_config", "not a JSON object: %v", err)
		}
		for k, v := range sub {
			switch {
			case k == "rope_scaling" || k == "rope_parameters":
				rope = v
			case k == "model_type" || k == "architectures" || vlKeys[k]:
				// the text model's own names and copies of the token ids
			case textKeys[k]:
				text[k] = v
			default:
				return nil, tensor.Errorf(tensor.ErrParam, op, "text_config."+k, "key is not supported by this implementation")
			}
		}
	}
	delete(text, "head_dim") // the VL text models derive it from hidden_size
	var rp struct {
		Theta json.RawMessage `json:"rope_theta"`
	}
	if json.Unmarshal(rope, &rp) == nil && rp.Theta != nil { // rope_parameters carries rope_theta
		text["rope_theta"] = rp.Theta
	}
	text["architectures"] = json.RawMessage(`["` + hfmodel.ArchQwen2 + `"]`)
	text["model_type"] = json.RawMessage(`"qwen2"`)
	textJSON, _ := json.Marshal(text)
	var err error
	if c.Text, err = hfmodel.ParseConfig(textJSON); err != nil {
		return nil, err
	}
	if c.Text.HiddenSize%c.Text.NumAttentionHeads != 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "hidden_size", "%d is not a multiple of num_attention_heads %d", c.Text.HiddenSize, c.Text.NumAttentionHeads)
	}
	if c.MRoPESection, err = parseMRoPE(rope, c.Text.HeadDim); err != nil {
		return nil, err
	}
	if c.Vision, err = parseVision(raw["vision_config"], c.Variant); err != nil {
		return nil, err
	}
	if c.Tokens, err = ParseVisionTokens(data); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw["vision_end_token_id"], &c.VisionEndID); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "vision_end_token_id", "missing or not an integer")
	}
	v := c.Text.VocabSize
	for name, id := range map[string]int64{"vision_start_token_id": c.Tokens.VisionStartID, "vision_end_token_id": c.VisionEndID, "image_token_id": c.Tokens.ImageID, "video_token_id": c.Tokens.VideoID} {
		if id < 0 || id >= int64(v) {
			return nil, tensor.Errorf(tensor.ErrParam, op, name, "%d is outside the vocabulary [0, %d)", id, v)
		}
	}
	if c.Vision.OutDim != c.Text.HiddenSize {
		return nil, tensor.Errorf(tensor.ErrParam, op, "vision_config", "the merger's output size %d differs from the language model's hidden_size %d", c.Vision.OutDim, c.Text.HiddenSize)
	}
	if c.Tokens.MergeSize != c.Vision.MergeSize {
		return nil, tensor.Errorf(tensor.ErrParam, op, "vision_config.spatial_merge_size", "inconsistent")
	}
	return c, nil
}

// parseMRoPE reads rope_scaling's mrope_section ({"type": "mrope"} in the original configs,
// rope_type "default" in newer ones).
func parseMRoPE(v json.RawMessage, headDim int) ([]int, error) {
	const op = "qwenvl.ParseConfig"
	var rs struct {
		Type     string `json:"type"`
		RopeType string `json:"rope_type"`
		Section  []int  `json:"mrope_section"`
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(v, &rs); err != nil || rs.Section == nil || json.Unmarshal(v, &keys) != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "%s: want an object with mrope_section", v)
	}
	for k := range keys {
		if k != "type" && k != "rope_type" && k != "mrope_section" && k != "rope_theta" {
			return nil, tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "key %q is not supported (M-RoPE without scaling)", k)
		}
	}
	for _, t := range []string{rs.Type, rs.RopeType} {
		if t != "" && t != "mrope" && t != "default" {
			return nil, tensor.Errorf(tensor.ErrParam, op, "rope_scaling", "rope type %q is not supported (mrope)", t)
		}
	}
	sum := 0
	for _, s := range rs.Section {
		if s < 0 {
			return nil, tensor.Errorf(tensor.ErrParam, op, "rope_scaling.mrope_section", "%v has a negative size", rs.Section)
		}
		sum += s
	}
	if len(rs.Section) != 3 || sum != headDim/2 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "rope_scaling.mrope_section", "%v: want 3 sizes summing to head_dim/2 = %d", rs.Section, headDim/2)
	}
	return rs.Section, nil
}

// parseVision reads vision_config with each variant's defaults (Qwen2VLVisionConfig,
// Qwen2_5_VLVisionConfig).
func parseVision(v json.RawMessage, variant string) (VisionConfig, error) {
	const op = "qwenvl.ParseConfig"
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config", "missing or not an object")
	}
	vc := VisionConfig{Depth: 32, Heads: 16, InChannels: 3, PatchSize: 14, TemporalPatchSize: 2, MergeSize: 2}
	var act string
	var mlpRatio float64
	ints := map[string]*int{
		"depth": &vc.Depth, "num_heads": &vc.Heads, "in_chans": &vc.InChannels, "in_channels": &vc.InChannels,
		"patch_size": &vc.PatchSize, "temporal_patch_size": &vc.TemporalPatchSize, "spatial_merge_size": &vc.MergeSize,
	}
	inert := map[string]bool{"model_type": true, "initializer_range": true, "spatial_patch_size": true, "_name_or_path": true, "torch_dtype": true, "dtype": true}
	if variant == Qwen2VL {
		vc.Dim, vc.OutDim, mlpRatio, act = 1280, 3584, 4, "quick_gelu"
		ints["embed_dim"], ints["hidden_size"] = &vc.Dim, &vc.OutDim
	} else {
		vc.Dim, vc.MLPDim, vc.OutDim, act = 3584, 3420, 3584, "silu"
		vc.WindowSize, vc.FullAttBlocks, vc.TokensPerSecond = 112, []int{7, 15, 23, 31}, 4
		ints["hidden_size"], ints["intermediate_size"], ints["out_hidden_size"] = &vc.Dim, &vc.MLPDim, &vc.OutDim
		ints["window_size"], ints["tokens_per_second"] = &vc.WindowSize, &vc.TokensPerSecond
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		var err error
		switch {
		case ints[k] != nil:
			err = json.Unmarshal(raw[k], ints[k])
		case k == "hidden_act":
			err = json.Unmarshal(raw[k], &act)
		case k == "mlp_ratio" && variant == Qwen2VL:
			err = json.Unmarshal(raw[k], &mlpRatio)
		case k == "fullatt_block_indexes" && variant == Qwen25VL:
			err = json.Unmarshal(raw[k], &vc.FullAttBlocks)
		case inert[k]:
		default:
			return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config."+k, "key is not supported by this implementation")
		}
		if err != nil {
			return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config."+k, "%v", err)
		}
	}
	if variant == Qwen2VL {
		vc.MLPDim = int(float64(vc.Dim) * mlpRatio)
	}
	a, err := tensor.ParseActivation(act)
	if err != nil {
		return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config.hidden_act", "%v", err)
	}
	vc.Act = a
	for name, n := range map[string]int{"depth": vc.Depth, "dim": vc.Dim, "num_heads": vc.Heads, "mlp size": vc.MLPDim, "output size": vc.OutDim, "in_channels": vc.InChannels, "patch_size": vc.PatchSize, "temporal_patch_size": vc.TemporalPatchSize, "spatial_merge_size": vc.MergeSize} {
		if n <= 0 {
			return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config", "%s %d must be positive", name, n)
		}
	}
	if vc.Dim%vc.Heads != 0 || vc.HeadDim()%4 != 0 {
		return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config", "head size %d/%d must be a whole multiple of 4 (2D rotary)", vc.Dim, vc.Heads)
	}
	if variant == Qwen25VL {
		unit := vc.MergeSize * vc.PatchSize
		if vc.WindowSize < unit || vc.WindowSize%unit != 0 {
			return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config.window_size", "%d must be a positive multiple of spatial_merge_size·patch_size = %d", vc.WindowSize, unit)
		}
		for _, b := range vc.FullAttBlocks {
			if b < 0 || b >= vc.Depth {
				return VisionConfig{}, tensor.Errorf(tensor.ErrParam, op, "vision_config.fullatt_block_indexes", "%v: block %d is outside [0, %d)", vc.FullAttBlocks, b, vc.Depth)
			}
		}
	}
	return vc, nil
}

// MarshalJSON writes the config as it was read, with torch_dtype set to the Text config's
// (hfmodel's Save sets that to the dtype it writes).
func (c *Config) MarshalJSON() ([]byte, error) {
	m := maps.Clone(c.raw)
	dt, _ := json.Marshal(c.Text.TorchDType)
	m["torch_dtype"] = dt
	delete(m, "dtype")
	var buf []byte
	buf, err := json.MarshalIndent(m, "", "  ")
	return append(buf, '\n'), err
}

// LoadConfigFile reads a config.json file by path (the -config of `hf init`).
func LoadConfigFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "qwenvl.LoadConfigFile", "path", "%v", err)
	}
	return ParseConfig(data)
}
