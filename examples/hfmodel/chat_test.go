package hfmodel

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chatTemplates are the Qwen2.5, Qwen3 (tokenizer_config.json) and Qwen2-VL
// (chat_template.json, with Qwen2.5's special tokens) templates.
func chatTemplates(t *testing.T) map[string]*ChatTemplate {
	t.Helper()
	out := map[string]*ChatTemplate{}
	for _, name := range []string{"qwen2_5", "qwen3"} {
		ct, err := LoadChatTemplate(filepath.Join("testdata", name))
		require.NoError(t, err)
		out[name] = ct
	}
	dir := t.TempDir() // Qwen2-VL: its chat_template.json next to Qwen2.5's tokenizer_config.json
	for _, f := range []string{"qwen2_vl/chat_template.json", "qwen2_5/tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
	ct, err := LoadChatTemplate(dir)
	require.NoError(t, err)
	out["qwen2_vl"] = ct
	return out
}

// TestChatTemplateGoldens renders testdata/chat_conversations.jsonl and compares byte for byte
// with @huggingface/jinja's renderings (scripts/hf-goldens/chat.mjs).
func TestChatTemplateGoldens(t *testing.T) {
	templates := chatTemplates(t)
	var convs []json.RawMessage
	f, err := os.Open(filepath.Join("testdata", "chat_conversations.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct{ Conversation json.RawMessage }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		convs = append(convs, line.Conversation)
	}
	g, err := os.Open(filepath.Join("testdata", "chat_golden.jsonl"))
	require.NoError(t, err)
	defer g.Close()
	sc = bufio.NewScanner(g)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var want struct {
			Template            string
			Index               int
			AddGenerationPrompt bool `json:"add_generation_prompt"`
			Text                string
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &want))
		got, err := templates[want.Template].Render(convs[want.Index], want.AddGenerationPrompt)
		require.NoError(t, err, "%s #%d", want.Template, want.Index)
		require.Equal(t, want.Text, got, "%s conversation %d add_generation_prompt=%v", want.Template, want.Index, want.AddGenerationPrompt)
		n++
	}
	require.Equal(t, 74, n)
}

func TestPyJSON(t *testing.T) {
	v, order, err := decodeOrdered([]byte(`{"b": 1, "a": [1.5, 1e-05, 2e16, -0.0, true, null, "x\"\\\n\u0001é😀"], "c": {}}`))
	require.NoError(t, err)
	var sb = new(stringsBuilder)
	require.NoError(t, writePyJSON(&sb.Builder, v, order, -1, 0))
	require.Equal(t, `{"b": 1, "a": [1.5, 1e-05, 2e+16, -0.0, true, null, "x\"\\\n\u0001é😀"], "c": {}}`, sb.String())
	sb.Reset()
	require.NoError(t, writePyJSON(&sb.Builder, v, order, 2, 0))
	require.Equal(t, "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    1e-05,\n    2e+16,\n    -0.0,\n    true,\n    null,\n    \"x\\\"\\\\\\n\\u0001é😀\"\n  ],\n  \"c\": {}\n}", sb.String())
}

func TestChatTemplateErrors(t *testing.T) {
	ct, err := NewChatTemplate(`{{ raise_exception("no system role") }}`, nil)
	require.NoError(t, err)
	_, err = ct.Render([]byte(`{"messages": []}`), true)
	require.ErrorContains(t, err, "no system role")
	_, err = ct.Render([]byte(`{"messages": {}}`), true)
	require.ErrorContains(t, err, "messages")
	_, err = ct.Render([]byte(`[1]`), true)
	require.ErrorContains(t, err, "JSON object")
	_, err = NewChatTemplate(`{% if %}`, nil)
	require.Error(t, err)
	_, err = LoadChatTemplate(t.TempDir())
	require.ErrorContains(t, err, "chat_template")
}

type stringsBuilder struct{ strings.Builder }
