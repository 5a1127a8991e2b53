package hfmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/mtrl-go/mtrl/tensor"
)

// ChatTemplate is a checkpoint's Jinja chat template, rendered as transformers'
// apply_chat_template does: trim_blocks and lstrip_blocks on, the conversation's keys, tools
// (None when absent), add_generation_prompt and the tokenizer's special tokens as variables, and
// tojson writing Python's json.dumps(ensure_ascii=False) text (keys in the input's order, ", "
// and ": " separators).
type ChatTemplate struct {
	Source string
	tpl    *exec.Template
	vars   map[string]any // bos_token, eos_token, … from tokenizer_config.json
}

// LoadChatTemplate reads the chat template of a checkpoint directory where transformers looks
// for it: chat_template.jinja, chat_template.json, then tokenizer_config.json's chat_template
// (a string, or a list of named templates of which "default" is used).
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	const op = "hfmodel.LoadChatTemplate"
	cfg, err := os.ReadFile(filepath.Join(dir, TokenizerConfigFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, tensor.Errorf(tensor.ErrParam, op, TokenizerConfigFile, "%v", err)
	}
	if src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return NewChatTemplate(string(src), cfg)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "chat_template.json")); err == nil {
		var f struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, "chat_template.json", "%v", err)
		}
		src, err := templateSource(f.ChatTemplate)
		if err != nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, "chat_template.json", "%v", err)
		}
		return NewChatTemplate(src, cfg)
	}
	if cfg == nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, dir, "has no chat_template.jinja, chat_template.json or %s", TokenizerConfigFile)
	}
	var f struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(cfg, &f); err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, TokenizerConfigFile, "%v", err)
	}
	if isNull(f.ChatTemplate) {
		return nil, tensor.Errorf(tensor.ErrParam, op, TokenizerConfigFile, "has no chat_template")
	}
	src, err := templateSource(f.ChatTemplate)
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, TokenizerConfigFile, "%v", err)
	}
	return NewChatTemplate(src, cfg)
}

func templateSource(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("chat_template lists no template named \"default\"")
}

// gonja's environment with the filters and functions chat templates rely on as transformers
// defines them.
var chatEnv = sync.OnceValue(func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	if err := filters.Replace("tojson", filterPyJSON); err != nil {
		panic(err)
	}
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", func(msg string) (string, error) {
		return "", fmt.Errorf("the chat template raised: %s", msg)
	})
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
})

// NewChatTemplate compiles a template. tokenizerConfig (a tokenizer_config.json, or nil)
// provides the special-token variables.
func NewChatTemplate(source string, tokenizerConfig []byte) (*ChatTemplate, error) {
	const op = "hfmodel.NewChatTemplate"
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return nil, err
	}
	root := "chat_template"
	shifted, err := loaders.NewShiftedLoader(root, strings.NewReader(source), loader)
	if err != nil {
		return nil, err
	}
	gonja.SetLoggerOutput(io.Discard)
	tpl, err := exec.NewTemplate(root, cfg, shifted, chatEnv())
	if err != nil {
		return nil, tensor.Errorf(tensor.ErrParam, op, "chat_template", "%v", err)
	}
	ct := &ChatTemplate{Source: source, tpl: tpl, vars: map[string]any{}}
	if tokenizerConfig != nil {
		var tc map[string]json.RawMessage
		if err := json.Unmarshal(tokenizerConfig, &tc); err != nil {
			return nil, tensor.Errorf(tensor.ErrParam, op, TokenizerConfigFile, "%v", err)
		}
		for _, k := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
			v, ok := tc[k]
			if !ok {
				continue
			}
			var s string
			var obj struct{ Content string }
			switch {
			case isNull(v):
			case json.Unmarshal(v, &s) == nil:
				ct.vars[k] = s
			case json.Unmarshal(v, &obj) == nil: // older files: an AddedToken object
				ct.vars[k] = obj.Content
			}
		}
		var extra []string
		if json.Unmarshal(tc["additional_special_tokens"], &extra) == nil && extra != nil {
			list := make([]any, len(extra))
			for i, s := range extra {
				list[i] = s
			}
			ct.vars["additional_special_tokens"] = list
		}
	}
	return ct, nil
}

// Render renders a conversation given as a JSON object: "messages" (required), "tools"
// (optional) and any other keys become template variables (enable_thinking, add_vision_id, …).
// addGenerationPrompt appends the assistant turn's opening.
func (c *ChatTemplate) Render(conversation []byte, addGenerationPrompt bool) (string, error) {
	const op = "hfmodel.ChatTemplate.Render"
	v, order, err := decodeOrdered(conversation)
	if err != nil {
		return "", tensor.Errorf(tensor.ErrParam, op, "conversation", "%v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "", tensor.Errorf(tensor.ErrParam, op, "conversation", "must be a JSON object with \"messages\"")
	}
	if _, ok := obj["messages"].([]any); !ok {
		return "", tensor.Errorf(tensor.ErrParam, op, "messages", "must be a JSON array of messages")
	}
	ctx := exec.EmptyContext()
	for k, v := range c.vars {
		ctx.Set(k, v)
	}
	ctx.Set("tools", nil)
	ctx.Set("documents", nil)
	for k, v := range obj {
		ctx.Set(k, v)
	}
	ctx.Set("add_generation_prompt", addGenerationPrompt)
	ctx.Set(orderKey, order)
	out, err := c.tpl.ExecuteToString(ctx)
	if err != nil {
		return "", tensor.Errorf(tensor.ErrParam, op, "chat_template", "%v", err)
	}
	return out, nil
}

// orderKey is the context variable holding the key order of every JSON object of the
// conversation, for tojson (Go maps have none).
const orderKey = "__mtrl_json_key_order"

type keyOrder map[uintptr][]string

// decodeOrdered decodes JSON into map[string]any, []any, string, bool, nil, int64 (integer
// literals) and float64, remembering each object's key order by the map's identity.
func decodeOrdered(data []byte) (any, keyOrder, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	order := keyOrder{}
	var value func() (any, error)
	value = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				m := map[string]any{}
				var keys []string
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, err
					}
					k := kt.(string)
					v, err := value()
					if err != nil {
						return nil, err
					}
					if _, dup := m[k]; !dup {
						keys = append(keys, k)
					}
					m[k] = v
				}
				dec.Token() // '}'
				order[reflect.ValueOf(m).Pointer()] = keys
				return m, nil
			case '[':
				list := []any{}
				for dec.More() {
					v, err := value()
					if err != nil {
						return nil, err
					}
					list = append(list, v)
				}
				dec.Token() // ']'
				return list, nil
			}
		case json.Number:
			if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
				return int(i), nil
			}
			f, err := t.Float64()
			return f, err
		}
		return tok, nil
	}
	v, err := value()
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = fmt.Errorf("trailing data after the JSON value")
		}
	}
	return v, order, err
}

// filterPyJSON is tojson as transformers defines it: json.dumps(x, ensure_ascii=False) with
// optional indent; object keys in the conversation's order (sorted for objects the template
// built itself).
func filterPyJSON(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		indent = v.Integer()
	}
	var order keyOrder
	if v, ok := e.Environment.Context.Get(orderKey); ok {
		order, _ = v.(keyOrder)
	}
	var sb strings.Builder
	if err := writePyJSON(&sb, in.Interface(), order, indent, 0); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(sb.String())
}

func writePyJSON(sb *strings.Builder, v any, order keyOrder, indent, depth int) error {
	newline := func(d int) {
		if indent >= 0 {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	itemSep := ", "
	if indent >= 0 {
		itemSep = ","
	}
	if ev, ok := v.(*exec.Value); ok {
		v = ev.Interface()
	}
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		sb.WriteString(map[bool]string{true: "true", false: "false"}[x])
	case string:
		writePyString(sb, x)
	case int:
		sb.WriteString(strconv.Itoa(x))
	case int64:
		sb.WriteString(strconv.FormatInt(x, 10))
	case float64:
		sb.WriteString(pyFloat(x))
	case []any:
		if len(x) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := writePyJSON(sb, item, order, indent, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			sb.WriteString("{}")
			return nil
		}
		keys := order[reflect.ValueOf(x).Pointer()]
		if len(keys) != len(x) {
			keys = sortedKeys(x)
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			writePyString(sb, k)
			sb.WriteString(": ")
			if err := writePyJSON(sb, x[k], order, indent, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Slice, reflect.Array:
			list := make([]any, rv.Len())
			for i := range list {
				list[i] = rv.Index(i).Interface()
			}
			return writePyJSON(sb, list, order, indent, depth)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			sb.WriteString(fmt.Sprint(v))
		case reflect.Float32:
			sb.WriteString(pyFloat(rv.Float()))
		default:
			return fmt.Errorf("tojson: cannot serialize %T", v)
		}
	}
	return nil
}

// writePyString quotes s as Python's json.dumps(ensure_ascii=False): only '"', '\\' and control
// characters are escaped.
func writePyString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}

// pyFloat formats f as Python's repr: the shortest round-tripping digits, always with a
// decimal point or exponent; exponent form below 1e-4 and from 1e16.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64) // 1e-05 → "1e-05" as Python
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mant + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
