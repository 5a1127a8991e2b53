package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

// logits writes, for each line's token ids, the model's next-token logits: one JSON array over
// positions of arrays over the vocabulary, each value the shortest text that reads back as the
// same float32.
func logits(dir string, stdin io.Reader, stdout io.Writer) error {
	if isVL(dir) {
		return logitsVL(dir, stdin, stdout)
	}
	ck, err := hfmodel.OpenWeights(dir)
	if err != nil {
		return err
	}
	m, err := hflm.Load(ck)
	ck.Close()
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 1<<20)
	defer w.Flush()
	var buf []byte
	return eachLine(stdin, func(_ int, line []byte) error {
		var ids []int32
		if err := json.Unmarshal(line, &ids); err != nil {
			return fmt.Errorf("want a JSON array of token ids: %v", err)
		}
		lg, err := m.Logits(ids)
		if err != nil {
			return err
		}
		v, err := lg.Float32s()
		if err != nil {
			return err
		}
		buf = appendLogits(buf[:0], v, len(ids), m.Config.VocabSize)
		_, err = w.Write(buf)
		return err
	})
}

// appendLogits appends the logits v [positions, vocab] as one JSON line: an array over
// positions of arrays over the vocabulary, each value the shortest text that reads back as the
// same float32.
func appendLogits(buf []byte, v []float32, positions, vocab int) []byte {
	buf = append(buf, '[')
	for t := range positions {
		if t > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		for j, z := range v[t*vocab : (t+1)*vocab] {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendFloat(buf, float64(z), 'g', -1, 32)
		}
		buf = append(buf, ']')
	}
	return append(buf, ']', '\n')
}

// genFlags are generate's sampling flags.
type genFlags struct {
	maxNew      *int
	temperature *float64
	topP        *float64
	topK        *int
	seed        *uint64
	skipSpecial *bool
}

func generateFlags(fs *flag.FlagSet, cmd string) *genFlags {
	if cmd != "generate" {
		return nil
	}
	return &genFlags{
		maxNew:      fs.Int("max-new-tokens", 0, "most new tokens per completion (0: generation_config's max_new_tokens, else 256)"),
		temperature: fs.Float64("temperature", 0, "sampling temperature; 0 is greedy decoding"),
		topP:        fs.Float64("top-p", 1, "nucleus probability in (0, 1]"),
		topK:        fs.Int("top-k", 0, "keep the K most likely tokens (0: all)"),
		seed:        fs.Uint64("seed", 0, "random seed of the sampling (line i draws from PCG(seed, i))"),
		skipSpecial: fs.Bool("skip-special-tokens", true, "leave special tokens (the stop token) out of the text"),
	}
}

// generate renders each conversation with the chat template (add_generation_prompt), encodes
// it and writes the decoded completion.
func generate(dir string, f *genFlags, stdin io.Reader, stdout io.Writer) error {
	if isVL(dir) {
		return generateVL(dir, f, stdin, stdout)
	}
	ct, err := hfmodel.LoadChatTemplate(dir)
	if err != nil {
		return err
	}
	tok, err := hfmodel.LoadTokenizer(dir)
	if err != nil {
		return err
	}
	ck, err := hfmodel.Open(dir)
	if err != nil {
		return err
	}
	gc := ck.Generation
	if gc == nil {
		gc = hfmodel.NewGenerationConfig(ck.Config)
	}
	m, err := hflm.Load(ck)
	ck.Close()
	if err != nil {
		return err
	}
	s := samplingOf(f, gc)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return eachLine(stdin, func(n int, line []byte) error {
		prompt, err := ct.Render(line, true)
		if err != nil {
			return err
		}
		ids := tok.Encode(prompt)
		p := make([]int32, len(ids))
		for i, id := range ids {
			p[i] = int32(id)
		}
		rng := rand.New(rand.NewPCG(*f.seed, uint64(n)))
		out, err := m.Generate([][]int32{p}, s, []*rand.Rand{rng})
		if err != nil {
			return err
		}
		gen := make([]int, len(out[0]))
		for i, id := range out[0] {
			gen[i] = int(id)
		}
		text, err := tok.Decode(gen, *f.skipSpecial)
		if err != nil {
			return err
		}
		if err := enc.Encode(text); err != nil {
			return err
		}
		return w.Flush()
	})
}
