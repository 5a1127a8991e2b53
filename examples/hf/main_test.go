package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	require.ErrorContains(t, err, "not implemented yet: needs the Qwen2 model (issue 22)")
	_, err = runHF(t, "", "generate", "-model", dir)
	require.ErrorContains(t, err, "not implemented yet")
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
