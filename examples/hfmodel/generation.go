package hfmodel

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mtrl-go/mtrl/tensor"
)

// GenerationConfig is generation_config.json: the sampling defaults a checkpoint ships with.
// Nil pointers are keys the file does not set.
type GenerationConfig struct {
	BOSTokenID        *int
	EOSTokenIDs       []int // one id or a list in the file
	PadTokenID        *int
	DoSample          *bool
	Temperature       *float64
	TopP              *float64
	TopK              *int
	RepetitionPenalty *float64
	MaxNewTokens      *int
	MaxLength         *int

	raw map[string]json.RawMessage // the file as read, written back unchanged
}

var generationKeys = map[string]bool{
	"bos_token_id": true, "eos_token_id": true, "pad_token_id": true, "do_sample": true,
	"temperature": true, "top_p": true, "top_k": true, "repetition_penalty": true,
	"max_new_tokens": true, "max_length": true,
	// bookkeeping
	"transformers_version": true, "_from_model_config": true, "use_cache": true,
}

// LoadGenerationConfig reads dir/generation_config.json; a directory without one gives nil, nil.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "hfmodel.LoadGenerationConfig", "generation_config.json", "%v", err)
	}
	return ParseGenerationConfig(data)
}

// ParseGenerationConfig parses a generation_config.json; a key it does not know is an error
// naming it.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	const op = "hfmodel.ParseGenerationConfig"
	g := &GenerationConfig{}
	if err := json.Unmarshal(data, &g.raw); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "generation_config.json", "not a JSON object: %v", err)
	}
	for _, k := range sortedKeys(g.raw) {
		if !generationKeys[k] {
			return nil, tensor.Errorf(tensor.ErrParam, op, k, "generation_config.json key %q is not supported", k)
		}
	}
	fields := []struct {
		key string
		dst any
	}{
		{"bos_token_id", &g.BOSTokenID}, {"pad_token_id", &g.PadTokenID}, {"do_sample", &g.DoSample},
		{"temperature", &g.Temperature}, {"top_p", &g.TopP}, {"top_k", &g.TopK},
		{"repetition_penalty", &g.RepetitionPenalty}, {"max_new_tokens", &g.MaxNewTokens},
		{"max_length", &g.MaxLength},
	}
	for _, f := range fields {
		if v, ok := g.raw[f.key]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return nil, tensor.Errorf(tensor.ErrParam, op, f.key, "%s: %v", v, err)
			}
		}
	}
	ids, err := intOrList(g.raw["eos_token_id"])
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "eos_token_id", "%v", err)
	}
	g.EOSTokenIDs = ids
	return g, nil
}

// MarshalJSON writes the keys read (or set from a Config by NewGenerationConfig), sorted and
// indented as transformers writes them.
func (g *GenerationConfig) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range g.raw {
		m[k] = v
	}
	set := func(key string, v any, present bool) {
		if present {
			m[key] = v
		} else {
			delete(m, key)
		}
	}
	set("bos_token_id", g.BOSTokenID, g.BOSTokenID != nil)
	set("pad_token_id", g.PadTokenID, g.PadTokenID != nil)
	set("do_sample", g.DoSample, g.DoSample != nil)
	set("temperature", g.Temperature, g.Temperature != nil)
	set("top_p", g.TopP, g.TopP != nil)
	set("top_k", g.TopK, g.TopK != nil)
	set("repetition_penalty", g.RepetitionPenalty, g.RepetitionPenalty != nil)
	set("max_new_tokens", g.MaxNewTokens, g.MaxNewTokens != nil)
	set("max_length", g.MaxLength, g.MaxLength != nil)
	switch len(g.EOSTokenIDs) {
	case 0:
		delete(m, "eos_token_id")
	case 1:
		m["eos_token_id"] = g.EOSTokenIDs[0]
	default:
		m["eos_token_id"] = g.EOSTokenIDs
	}
	return marshalIndent(m)
}

// NewGenerationConfig is what transformers derives from a model config without a
// generation_config.json: its bos, eos and pad token ids.
func NewGenerationConfig(c *Config) *GenerationConfig {
	return &GenerationConfig{BOSTokenID: c.BOSTokenID, EOSTokenIDs: c.EOSTokenIDs, PadTokenID: c.PadTokenID}
}
