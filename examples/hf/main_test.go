package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

const testdata = "../hfmodel/testdata"

func runHF(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

// TestInitTokenizeChat is the fresh-clone path: init writes a tiny Qwen2 checkpoint with
// the real Qwen2.5 tokenizer, sharded in bfloat16; it opens, tokenize and chat read it.
func TestInitTokenizeChat(t *testing.T) {
	dir := t.TempDir()
	_, err := runHF(t, "", "init", "-config", filepath.Join(testdata, "tiny-qwen2-config.json"), "-out", dir,
		"-seed", "3", "-dtype", "bfloat16", "-shards", "2", "-tokenizer", filepath.Join(testdata, "qwen2_5"))
	require.NoError(t, err)
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors.index.json",
		"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	ck, err := hfmodel.Open(dir)
	require.NoError(t, err)
	require.Equal(t, hfmodel.BFloat16, ck.Tensors[0].DType)
	require.Equal(t, "bfloat16", ck.Config.TorchDType)
	require.NoError(t, ck.Close())

	out, err := runHF(t, "\"Hello world!\"\n\n\"你好<|im_end|>\"\n\"\"\n", "tokenize", "-model", dir)
	require.NoError(t, err)
	require.Equal(t, "[9707,1879,0]\n[108386,151645]\n[]\n", out)

	out, err = runHF(t, `{"messages": [{"role": "user", "content": "Hi"}]}`+"\n", "chat", "-model", dir)
	require.NoError(t, err)
	var prompt string
	require.NoError(t, json.Unmarshal([]byte(out), &prompt))
	require.Equal(t, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", prompt)
	require.NotContains(t, out, `\u003c`) // no HTML escaping

	// the same seed gives the same weights whatever the layout
	dir2 := t.TempDir()
	_, err = runHF(t, "", "init", "-config", filepath.Join(testdata, "tiny-qwen2-config.json"), "-out", dir2, "-seed", "3", "-dtype", "bfloat16")
	require.NoError(t, err)
	a, err := hfmodel.Open(dir)
	require.NoError(t, err)
	defer a.Close()
	b, err := hfmodel.Open(dir2)
	require.NoError(t, err)
	defer b.Close()
	for i := range a.Tensors {
		require.Equal(t, a.Tensors[i].Data, b.Tensors[i].Data)
	}
}

func TestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := runHF(t, "[1,2]\n", "logits", "-model", dir)
	require.ErrorContains(t, err, "config.json")
	_, err = runHF(t, "", "generate", "-model", dir)
	require.ErrorContains(t, err, "chat_template")
	_, err = runHF(t, "", "tokenize")
	require.ErrorContains(t, err, "-model")
	_, err = runHF(t, "", "frobnicate")
	require.ErrorContains(t, err, "unknown command")
	_, err = runHF(t, "", "init", "-config", filepath.Join(testdata, "tiny-qwen2-config.json"), "-out", dir, "-dtype", "float16")
	require.ErrorContains(t, err, "float32 or bfloat16")
	_, err = runHF(t, "\"a\"\n", "tokenize", "-model", dir)
	require.ErrorContains(t, err, "tokenizer.json")

	// a bad input line names its number; config.json's vocab_size must hold the tokenizer's ids
	require.NoError(t, hfmodel.CopyTokenizerFiles(dir, filepath.Join(testdata, "qwen2_5")))
	_, err = runHF(t, "\"a\"\n42\n", "tokenize", "-model", dir)
	require.ErrorContains(t, err, "stdin line 2")
	_, err = runHF(t, "{\"messages\": 1}\n", "chat", "-model", dir)
	require.ErrorContains(t, err, "stdin line 1")
	cfg, err := os.ReadFile(filepath.Join(testdata, "tiny-llama-config.json")) // vocab_size 300
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	_, err = runHF(t, "\"a\"\n", "tokenize", "-model", dir)
	require.ErrorContains(t, err, "vocab_size 300")
}

// TestLogitsGenerate runs logits and generate on a tiny Qwen2 checkpoint with the real Qwen2.5
// tokenizer: logits prints the model's float32 values exactly and needs only config.json and
// the weights; generate is greedy by default and reproducible with a seed when sampling.
func TestLogitsGenerate(t *testing.T) {
	dir := t.TempDir()
	_, err := runHF(t, "", "init", "-config", filepath.Join(testdata, "tiny-qwen2-config.json"), "-out", dir,
		"-seed", "5", "-dtype", "bfloat16", "-shards", "2", "-tokenizer", filepath.Join(testdata, "qwen2_5"))
	require.NoError(t, err)
	m, err := hflm.LoadDir(dir)
	require.NoError(t, err)

	// logits: only config.json and the weights are read
	weightsOnly := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(weightsOnly, f), data, 0o644))
	}
	out, err := runHF(t, "[9707, 1879, 0]\n[151644]\n", "logits", "-model", weightsOnly)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	for i, ids := range [][]int32{{9707, 1879, 0}, {151644}} {
		var got [][]float32
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &got))
		want, err := m.Logits(ids)
		require.NoError(t, err)
		wv, err := want.Float32s()
		require.NoError(t, err)
		require.Len(t, got, len(ids))
		for p, row := range got {
			require.Equal(t, wv[p*151936:(p+1)*151936], row)
		}
	}
	_, err = runHF(t, "[1, 151936]\n", "logits", "-model", weightsOnly)
	require.ErrorContains(t, err, "stdin line 1")

	// generate: greedy, the chat template's prompt, stopping at <|im_end|> or 6 tokens
	conv := `{"messages": [{"role": "user", "content": "What is 1+1?"}]}` + "\n"
	out, err = runHF(t, conv, "generate", "-model", dir, "-max-new-tokens", "6")
	require.NoError(t, err)
	tok, err := hfmodel.LoadTokenizer(dir)
	require.NoError(t, err)
	ct, err := hfmodel.LoadChatTemplate(dir)
	require.NoError(t, err)
	prompt, err := ct.Render([]byte(conv), true)
	require.NoError(t, err)
	var p []int32
	for _, id := range tok.Encode(prompt) {
		p = append(p, int32(id))
	}
	gen, err := m.Generate([][]int32{p}, hflm.Sampling{MaxNewTokens: 6, TopP: 1, Stop: []int32{151645, 151643}}, nil)
	require.NoError(t, err)
	var ids []int
	for _, id := range gen[0] {
		ids = append(ids, int(id))
	}
	text, err := tok.Decode(ids, true)
	require.NoError(t, err)
	var got string
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, text, got)

	sampled := func(seed string) string {
		out, err := runHF(t, conv+conv, "generate", "-model", dir, "-max-new-tokens", "5", "-temperature", "1.5", "-top-k", "50", "-seed", seed)
		require.NoError(t, err)
		return out
	}
	a := sampled("7")
	require.Equal(t, a, sampled("7"))
	require.Len(t, strings.Split(strings.TrimSpace(a), "\n"), 2)
}
