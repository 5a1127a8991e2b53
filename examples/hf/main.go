// Command hf inspects and makes Hugging Face checkpoint directories (Qwen2/Qwen2.5, Llama, and
// Qwen2-VL/Qwen2.5-VL) with examples/hfmodel and examples/qwenvl:
//
//	go run ./examples/hf tokenize -model DIR   # stdin: one JSON string a line; stdout: one JSON array of token ids a line
//	go run ./examples/hf chat -model DIR       # stdin: {"messages": [...]} a line; stdout: the prompt (add_generation_prompt=true) as a JSON string a line
//	go run ./examples/hf init -config FILE -out DIR [-seed N] [-dtype float32|bfloat16] [-shards K] [-tokenizer DIR] [-layout legacy|nested]
//	go run ./examples/hf logits -model DIR     # stdin: one JSON array of token ids a line; stdout: a JSON array over positions of arrays over the vocabulary of float32 logits
//	go run ./examples/hf generate -model DIR [-max-new-tokens N] [-temperature T -top-p P -top-k K -seed S]
//	                                           # stdin: {"messages": [...]} a line; stdout: the completion (greedy by default) as a JSON string a line
//	go run ./examples/hf preprocess -model DIR -image FILE…  # Qwen2-VL: image_grid_thw, pixel_values' shape and statistics
//
// For a Qwen2-VL or Qwen2.5-VL checkpoint (examples/qwenvl), logits and generate also read
// {"messages": [...], "images": ["file.png", …], "videos": [["frame0.png", …], …]} lines: the
// images and video frames are preprocessed as Qwen2VLImageProcessor does and each
// <|image_pad|> / <|video_pad|> of the rendered prompt is expanded by its grid; logits also reads {"ids": [...], "images": [...]} (one <|image_pad|> per image) and
// renders messages with the assistant turn opened.
//
// Each subcommand reads only the files it needs: tokenize the tokenizer (and config.json when
// present, to check the ids fit the model), chat the chat template and tokenizer_config.json,
// logits config.json and the weights, generate all of these and generation_config.json.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mtrl-go/mtrl/examples/qwenvl"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hf:", err)
		os.Exit(1)
	}
}

const usage = `usage: hf <command> [flags]
commands:
  tokenize -model DIR   JSON strings on stdin → JSON arrays of token ids on stdout
  chat -model DIR       {"messages": [...]} on stdin → rendered prompts (JSON strings) on stdout
  init -config FILE -out DIR [-seed N] [-dtype float32|bfloat16] [-shards K] [-tokenizer DIR] [-layout legacy|nested]
                        random weights for a Qwen2/Llama or Qwen2-VL/Qwen2.5-VL config.json
  preprocess -model DIR -image FILE...
                        Qwen2-VL image preprocessing → image_grid_thw, pixel_values shape and statistics (JSON)
  logits -model DIR     JSON arrays of token ids on stdin → per line, the logits [positions][vocabulary] on stdout
                        (Qwen2-VL: also {"messages": [...], "images": [...]} or {"ids": [...], "images": [...]})
  generate -model DIR [-max-new-tokens N] [-temperature T] [-top-p P] [-top-k K] [-seed S]
                        {"messages": [...]} on stdin (Qwen2-VL: with "images": [...]) → completions (JSON strings) on stdout; greedy unless -temperature > 0`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	fs := flag.NewFlagSet("hf "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "checkpoint directory")
	gen := generateFlags(fs, args[0])
	switch args[0] {
	case "tokenize", "chat", "logits", "generate":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *model == "" || fs.NArg() > 0 {
			return fmt.Errorf("%s needs -model DIR and no other arguments", args[0])
		}
		switch args[0] {
		case "tokenize":
			return tokenize(*model, stdin, stdout)
		case "chat":
			return chat(*model, stdin, stdout)
		case "logits":
			return logits(*model, stdin, stdout)
		}
		return generate(*model, gen, stdin, stdout)
	case "init":
		return initCheckpoint(fs, args[1:])
	case "preprocess":
		return qwenvl.RunPreprocessCommand(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// eachLine calls f with every non-empty line of r and its 1-based number.
func eachLine(r io.Reader, f func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := f(n, sc.Bytes()); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
	}
	return sc.Err()
}

func tokenize(dir string, stdin io.Reader, stdout io.Writer) error {
	tok, err := hfmodel.LoadTokenizer(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, hfmodel.ConfigFile)); err == nil {
		var cfg *hfmodel.Config
		if isVL(dir) {
			vl, err := qwenvl.LoadConfig(dir)
			if err != nil {
				return err
			}
			cfg = vl.Text
		} else if cfg, err = hfmodel.LoadConfig(dir); err != nil {
			return err
		}
		if tok.VocabSize() > cfg.VocabSize {
			return fmt.Errorf("the tokenizer has %d ids, more than config.json's vocab_size %d", tok.VocabSize(), cfg.VocabSize)
		}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	return eachLine(stdin, func(_ int, line []byte) error {
		var text string
		if err := json.Unmarshal(line, &text); err != nil {
			return fmt.Errorf("want a JSON string: %v", err)
		}
		ids := tok.Encode(text)
		if ids == nil {
			ids = []int{}
		}
		return enc.Encode(ids)
	})
}

func chat(dir string, stdin io.Reader, stdout io.Writer) error {
	ct, err := hfmodel.LoadChatTemplate(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return eachLine(stdin, func(_ int, line []byte) error {
		prompt, err := ct.Render(line, true)
		if err != nil {
			return err
		}
		return enc.Encode(prompt)
	})
}

func initCheckpoint(fs *flag.FlagSet, args []string) error {
	configFile := fs.String("config", "", "config.json of the model to make (Qwen2ForCausalLM or LlamaForCausalLM)")
	out := fs.String("out", "", "output directory")
	seed := fs.Uint64("seed", 0, "random seed of the weights")
	dtype := fs.String("dtype", "float32", "float32 or bfloat16")
	shards := fs.Int("shards", 1, "number of safetensors files (more than 1 writes model.safetensors.index.json)")
	layout := fs.String("layout", "legacy", "Qwen2-VL weight names: legacy (model.layers.*, visual.*) or nested (model.language_model.*, model.visual.*)")
	tokenizer := fs.String("tokenizer", "", "directory whose tokenizer files (tokenizer.json or tokenizer.json.gz, tokenizer_config.json, …) are copied")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configFile == "" || *out == "" || fs.NArg() > 0 {
		return errors.New("init needs -config FILE and -out DIR")
	}
	dt, err := hfmodel.ParseDType(*dtype)
	if err != nil || dt == hfmodel.Float16 {
		return fmt.Errorf("-dtype %q: want float32 or bfloat16", *dtype)
	}
	data, err := os.ReadFile(*configFile)
	if err != nil {
		return err
	}
	if qwenvl.IsVLConfig(data) {
		if err := initVL(data, *out, *seed, dt, *shards, *layout); err != nil {
			return err
		}
	} else if err := initLM(data, *out, *seed, dt, *shards); err != nil {
		return err
	}
	if *tokenizer != "" {
		return hfmodel.CopyTokenizerFiles(*out, *tokenizer)
	}
	return nil
}

// initLM writes a random Qwen2 or Llama checkpoint.
func initLM(data []byte, out string, seed uint64, dt hfmodel.DType, shards int) error {
	cfg, err := hfmodel.ParseConfig(data)
	if err != nil {
		return err
	}
	ck, err := hfmodel.RandomCheckpoint(cfg, seed)
	if err != nil {
		return err
	}
	return ck.Save(out, hfmodel.SaveOptions{DType: dt, Shards: shards})
}

// initVL writes a random Qwen2-VL or Qwen2.5-VL checkpoint (one safetensors file) with its
// preprocessor_config.json.
func initVL(data []byte, out string, seed uint64, dt hfmodel.DType, shards int, layout string) error {
	cfg, err := qwenvl.ParseConfig(data)
	if err != nil {
		return err
	}
	if shards != 1 {
		return fmt.Errorf("-shards %d: Qwen2-VL checkpoints are written as one file", shards)
	}
	l := map[string]qwenvl.Layout{"legacy": qwenvl.LayoutLegacy, "nested": qwenvl.LayoutNested}
	lay, ok := l[layout]
	if !ok {
		return fmt.Errorf("-layout %q: want legacy or nested", layout)
	}
	return qwenvl.RandomCheckpoint(cfg, seed).Save(out, dt, lay)
}
