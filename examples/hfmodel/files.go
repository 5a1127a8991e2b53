package hfmodel

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mtrl-go/mtrl/tensor"
)

// Tokenizer files of a Hugging Face checkpoint directory.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
)

// tokenizerFiles are copied by CopyTokenizerFiles when present; tokenizer.json is required.
var tokenizerFiles = []string{
	TokenizerFile, TokenizerConfigFile, "special_tokens_map.json", "added_tokens.json",
	"vocab.json", "merges.txt", "chat_template.json", "chat_template.jinja",
}

// readMaybeGzipped reads dir/name, or dir/name.gz decompressed (the repository keeps the large
// tokenizer.json files of its test data gzipped).
func readMaybeGzipped(dir, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if !errors.Is(err, fs.ErrNotExist) {
		return data, err
	}
	gz, gzErr := os.ReadFile(filepath.Join(dir, name+".gz"))
	if gzErr != nil {
		return nil, err // report the plain name missing
	}
	r, gzErr := gzip.NewReader(bytes.NewReader(gz))
	if gzErr != nil {
		return nil, gzErr
	}
	return io.ReadAll(r)
}

// CopyTokenizerFiles copies the tokenizer files of src (tokenizer.json, possibly gzipped as
// tokenizer.json.gz, and whichever of tokenizer_config.json, special_tokens_map.json, vocab.json,
// merges.txt, chat_template.json/.jinja exist) into dst, so that dst is a complete checkpoint.
func CopyTokenizerFiles(dst, src string) error {
	const op = "hfmodel.CopyTokenizerFiles"
	for _, name := range tokenizerFiles {
		data, err := readMaybeGzipped(src, name)
		if errors.Is(err, fs.ErrNotExist) && name != TokenizerFile {
			continue
		}
		if err != nil {
			return tensor.Errorf(tensor.ErrParam, op, name, "%v", err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return tensor.Errorf(tensor.ErrParam, op, name, "%v", err)
		}
	}
	return nil
}
