package hflm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mtrl-go/mtrl/tensor"
)

// LoRAModule is a module an adapter can go on, as PEFT's target_modules and exclude_modules
// see it: its names (one per weight layout: transformers ≥ 4.52 nests Qwen2-VL's modules
// under model.language_model and model.visual), and whether it is an nn.Linear, which
// all-linear takes (a Conv3d patch embedding is not).
type LoRAModule struct {
	Names  []string
	Linear bool
}

// AllLinear is PEFT's shorthand for every linear layer but the output head.
const AllLinear = "all-linear"

// peftPattern is one target_modules or exclude_modules setting: a regular expression that
// must match a whole name (PEFT's single-string form), or names that match a module when equal
// to its name or to a suffix of it after a dot (PEFT's list form).
type peftPattern struct {
	re    *regexp.Regexp
	names []string
}

// plainName reports whether s reads as a module name (or all-linear) rather than a regular
// expression.
func plainName(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == ""
}

// newPattern reads a setting: one entry that is not a plain name is PEFT's string form, a
// regular expression (Go's RE2 syntax: no look-arounds) fullmatched against each name.
func newPattern(key string, entries []string) (peftPattern, error) {
	if len(entries) == 1 && !plainName(entries[0]) {
		re, err := regexp.Compile(`^(?:` + entries[0] + `)$`)
		if err != nil {
			return peftPattern{}, tensor.Errorf(tensor.ErrParam, "hflm.LoRAConfig", key, "%q is neither a module name nor a regular expression: %v", entries[0], err)
		}
		return peftPattern{re: re}, nil
	}
	for _, e := range entries {
		if !plainName(e) {
			return peftPattern{}, tensor.Errorf(tensor.ErrParam, "hflm.LoRAConfig", key, "%q: a regular expression must be the only entry (PEFT's string form)", e)
		}
	}
	return peftPattern{names: entries}, nil
}

// match reports whether the pattern selects a module named name; entry says which list entry
// did (-1 for the regular expression).
func (p peftPattern) match(name string) (bool, int) {
	if p.re != nil {
		return p.re.MatchString(name), -1
	}
	for i, e := range p.names {
		if name == e || strings.HasSuffix(name, "."+e) {
			return true, i
		}
	}
	return false, 0
}

// Resolve returns which modules get adapters, by PEFT's check_target_module_exists: a module
// excluded by ExcludeModules never does; otherwise all-linear takes every linear module and
// the other entries those any of whose names they match. Each entry must match some module
// (PEFT only fails when none of them does; a typo should not pass silently), and so must a
// regular expression.
func (c LoRAConfig) Resolve(mods []LoRAModule) ([]bool, error) {
	const op = "hflm.LoRAConfig.Resolve"
	if len(c.TargetModules) == 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "TargetModules", "is empty")
	}
	if len(mods) == 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "mods", "the model has no module that takes an adapter")
	}
	allLinear := false
	var rest []string
	for _, t := range c.TargetModules {
		if strings.EqualFold(t, AllLinear) {
			allLinear = true
		} else {
			rest = append(rest, t)
		}
	}
	if allLinear && len(rest) > 0 {
		return nil, tensor.Errorf(tensor.ErrParam, op, "TargetModules", "%v: all-linear is a setting of its own in PEFT, not a list entry", c.TargetModules)
	}
	target, err := newPattern("TargetModules", rest)
	if err != nil {
		return nil, err
	}
	var exclude peftPattern
	if len(c.ExcludeModules) > 0 {
		if exclude, err = newPattern("ExcludeModules", c.ExcludeModules); err != nil {
			return nil, err
		}
	}
	used := map[string]bool{}
	matches := func(p peftPattern, key string, m LoRAModule) bool {
		for _, n := range m.Names {
			if ok, i := p.match(n); ok {
				if i >= 0 {
					used[key+"\x00"+p.names[i]] = true
				} else {
					used[key] = true
				}
				return true
			}
		}
		return false
	}
	sel := make([]bool, len(mods))
	some := false
	for i, m := range mods {
		excluded := len(c.ExcludeModules) > 0 && matches(exclude, "ExcludeModules", m)
		targeted := (allLinear && m.Linear) || (!allLinear && matches(target, "TargetModules", m))
		sel[i] = targeted && !excluded
		some = some || sel[i]
	}
	for _, s := range []struct {
		key string
		p   peftPattern
		on  bool
	}{{"TargetModules", target, !allLinear}, {"ExcludeModules", exclude, len(c.ExcludeModules) > 0}} {
		if !s.on {
			continue
		}
		if s.p.re != nil && !used[s.key] {
			return nil, tensor.Errorf(tensor.ErrParam, op, s.key, "the regular expression %v matches no module that takes an adapter", s.p.re)
		}
		for _, e := range s.p.names {
			if !used[s.key+"\x00"+e] {
				return nil, tensor.Errorf(tensor.ErrParam, op, s.key, "%q matches no module that takes an adapter (such as %s)", e, strings.Join(mods[0].Names, ", "))
			}
		}
	}
	if !some {
		return nil, tensor.Errorf(tensor.ErrParam, op, "ExcludeModules", "%v excludes every module TargetModules %v selects", c.ExcludeModules, c.TargetModules)
	}
	return sel, nil
}

// peftSetting is a setting as adapter_config.json holds it: a regular expression or all-linear
// as a string, names as a list, nothing as null.
func peftSetting(entries []string) any {
	if len(entries) == 0 {
		return nil
	}
	if len(entries) == 1 && (!plainName(entries[0]) || strings.EqualFold(entries[0], AllLinear)) {
		return entries[0]
	}
	return entries
}

// stringOrList reads a setting of adapter_config.json back (a string, a list or null).
func stringOrList(key string, raw json.RawMessage) ([]string, error) {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, "hflm.ReadAdapterConfig", key, "want a string or a list of strings: %v", err)
	}
	return list, nil
}

// adapterConfig is adapter_config.json as PEFT writes it for a causal LM.
type adapterConfig struct {
	BaseModel      string          `json:"base_model_name_or_path"`
	Bias           string          `json:"bias"`
	FanInFanOut    bool            `json:"fan_in_fan_out"`
	InferenceMode  bool            `json:"inference_mode"`
	InitLoraWeight bool            `json:"init_lora_weights"`
	LoraAlpha      float64         `json:"lora_alpha"`
	LoraDropout    float64         `json:"lora_dropout"`
	ModulesToSave  []string        `json:"modules_to_save"`
	PeftType       string          `json:"peft_type"`
	R              int             `json:"r"`
	TargetModules  json.RawMessage `json:"target_modules"`
	ExcludeModules json.RawMessage `json:"exclude_modules"`
	TaskType       string          `json:"task_type"`
	UseDora        bool            `json:"use_dora"`
	UseRSLoRA      bool            `json:"use_rslora"`
}

// WriteAdapterConfig writes dir/adapter_config.json for adapters of configuration c on the
// model baseModel (written as base_model_name_or_path), as PEFT's save_pretrained does.
func WriteAdapterConfig(dir string, c LoRAConfig, baseModel string) error {
	tm, err := json.Marshal(peftSetting(c.TargetModules))
	if err != nil {
		return err
	}
	em, err := json.Marshal(peftSetting(c.ExcludeModules))
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(adapterConfig{
		BaseModel: baseModel, Bias: "none", InferenceMode: true, InitLoraWeight: true,
		LoraAlpha: c.Alpha, LoraDropout: c.Dropout, PeftType: "LORA", R: c.Rank,
		TargetModules: tm, ExcludeModules: em, TaskType: "CAUSAL_LM",
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, AdapterConfigFile), append(data, '\n'), 0o644)
}

// ReadAdapterConfig reads dir/adapter_config.json, which must describe a plain LoRA (no bias,
// DoRA, rsLoRA, fan_in_fan_out or modules_to_save).
func ReadAdapterConfig(dir string) (LoRAConfig, error) {
	const op = "hflm.ReadAdapterConfig"
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		return LoRAConfig{}, tensor.Errorf(tensor.ErrParam, op, AdapterConfigFile, "%v", err)
	}
	var ac adapterConfig
	if err := json.Unmarshal(data, &ac); err != nil {
		return LoRAConfig{}, tensor.Errorf(tensor.ErrParam, op, AdapterConfigFile, "%v", err)
	}
	if ac.PeftType != "LORA" || ac.Bias != "none" || ac.UseDora || ac.UseRSLoRA || ac.FanInFanOut || len(ac.ModulesToSave) > 0 {
		return LoRAConfig{}, tensor.Errorf(tensor.ErrParam, op, AdapterConfigFile, "peft_type %q, bias %q, use_dora %v, use_rslora %v, fan_in_fan_out %v, modules_to_save %v: only a plain LoRA is supported",
			ac.PeftType, ac.Bias, ac.UseDora, ac.UseRSLoRA, ac.FanInFanOut, ac.ModulesToSave)
	}
	c := LoRAConfig{Rank: ac.R, Alpha: ac.LoraAlpha, Dropout: ac.LoraDropout}
	if c.TargetModules, err = stringOrList("target_modules", ac.TargetModules); err != nil {
		return LoRAConfig{}, err
	}
	if c.ExcludeModules, err = stringOrList("exclude_modules", ac.ExcludeModules); err != nil {
		return LoRAConfig{}, err
	}
	return c, nil
}
