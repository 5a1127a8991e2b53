package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/mtrl-go/mtrl/examples/hflm"
	"github.com/mtrl-go/mtrl/examples/hfmodel"
	"github.com/mtrl-go/mtrl/examples/qwenvl"
)

// isVL reports whether dir's config.json is a Qwen2-VL or Qwen2.5-VL one.
func isVL(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, hfmodel.ConfigFile))
	return err == nil && qwenvl.IsVLConfig(data)
}

// vlSession holds what the VL subcommands read lazily: the model, and the chat template,
// tokenizer and image processor when a line needs them.
type vlSession struct {
	dir  string
	m    *qwenvl.Model
	ct   *hfmodel.ChatTemplate
	tok  *hfmodel.Tokenizer
	proc *qwenvl.Processor
}

func newVLSession(dir string) (*vlSession, error) {
	m, err := qwenvl.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	return &vlSession{dir: dir, m: m}, nil
}

// sample reads one input line: a JSON array of token ids (text only), or an object with "ids"
// (one <|image_pad|> per image, one <|video_pad|> per video) or "messages" (rendered by the
// chat template with the assistant turn opened, then tokenised), "images", the image files in
// order, and "videos", each video's frame files (already sampled; one second per temporal
// patch for Qwen2.5-VL's positions).
func (s *vlSession) sample(line []byte) (qwenvl.Sample, error) {
	var req struct {
		IDs      []int64         `json:"ids"`
		Messages json.RawMessage `json:"messages"`
		Images   []string        `json:"images"`
		Videos   [][]string      `json:"videos"`
	}
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &req.IDs); err != nil {
			return qwenvl.Sample{}, fmt.Errorf("want a JSON array of token ids or an object: %v", err)
		}
	} else if err := json.Unmarshal(line, &req); err != nil {
		return qwenvl.Sample{}, fmt.Errorf("want {\"messages\": [...], \"images\": [...]} or {\"ids\": [...], \"images\": [...]}: %v", err)
	}
	if req.Messages != nil {
		if req.IDs != nil {
			return qwenvl.Sample{}, fmt.Errorf("give either ids or messages, not both")
		}
		ids, err := s.render(line)
		if err != nil {
			return qwenvl.Sample{}, err
		}
		req.IDs = ids
	}
	var smp qwenvl.Sample
	if len(req.Images) > 0 || len(req.Videos) > 0 {
		if s.proc == nil {
			cfg, err := qwenvl.LoadProcessorConfig(s.dir)
			if err != nil {
				return qwenvl.Sample{}, err
			}
			if s.proc, err = qwenvl.NewProcessor(cfg); err != nil {
				return qwenvl.Sample{}, err
			}
		}
		imgs, err := loadImages(req.Images)
		if err != nil {
			return qwenvl.Sample{}, err
		}
		if len(imgs) > 0 {
			if smp.Images, err = s.proc.Images(imgs); err != nil {
				return qwenvl.Sample{}, err
			}
		}
		videos := make([][]*qwenvl.RGB, len(req.Videos))
		for i, frames := range req.Videos {
			if videos[i], err = loadImages(frames); err != nil {
				return qwenvl.Sample{}, err
			}
		}
		if len(videos) > 0 {
			if smp.Videos, err = s.proc.Video(videos); err != nil {
				return qwenvl.Sample{}, err
			}
		}
	}
	rows, err := qwenvl.ExpandTokens([][]int64{req.IDs}, smp.Images.Grids, smp.Videos.Grids, s.m.Config.Tokens)
	if err != nil {
		return qwenvl.Sample{}, err
	}
	smp.IDs = make([]int32, len(rows[0]))
	for i, id := range rows[0] {
		smp.IDs[i] = int32(id)
	}
	return smp, nil
}

// loadImages decodes image files.
func loadImages(files []string) ([]*qwenvl.RGB, error) {
	imgs := make([]*qwenvl.RGB, len(files))
	for i, f := range files {
		var err error
		if imgs[i], err = qwenvl.LoadImage(f); err != nil {
			return nil, err
		}
	}
	return imgs, nil
}

// render applies the chat template (add_generation_prompt) and the tokenizer.
func (s *vlSession) render(line []byte) ([]int64, error) {
	if s.ct == nil {
		var err error
		if s.ct, err = hfmodel.LoadChatTemplate(s.dir); err != nil {
			return nil, err
		}
		if s.tok, err = hfmodel.LoadTokenizer(s.dir); err != nil {
			return nil, err
		}
	}
	prompt, err := s.ct.Render(line, true)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, id := range s.tok.Encode(prompt) {
		ids = append(ids, int64(id))
	}
	return ids, nil
}

// logitsVL is logits for a VL checkpoint: per line, the logits of every position of the
// (expanded) sequence.
func logitsVL(dir string, stdin io.Reader, stdout io.Writer) error {
	s, err := newVLSession(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 1<<20)
	defer w.Flush()
	var buf []byte
	return eachLine(stdin, func(_ int, line []byte) error {
		smp, err := s.sample(line)
		if err != nil {
			return err
		}
		lg, err := s.m.Logits(smp)
		if err != nil {
			return err
		}
		v, err := lg.Float32s()
		if err != nil {
			return err
		}
		buf = appendLogits(buf[:0], v, len(smp.IDs), s.m.Config.Text.VocabSize)
		_, err = w.Write(buf)
		return err
	})
}

// generateVL is generate for a VL checkpoint: {"messages": [...], "images": [...]} lines.
func generateVL(dir string, f *genFlags, stdin io.Reader, stdout io.Writer) error {
	s, err := newVLSession(dir)
	if err != nil {
		return err
	}
	gc, err := hfmodel.LoadGenerationConfig(dir)
	if err != nil {
		return err
	}
	if gc == nil {
		gc = hfmodel.NewGenerationConfig(s.m.Config.Text)
	}
	if _, err := hfmodel.LoadChatTemplate(dir); err != nil {
		return err
	}
	smp := samplingOf(f, gc)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return eachLine(stdin, func(n int, line []byte) error {
		sm, err := s.sample(line)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(*f.seed, uint64(n)))
		out, err := s.m.Generate([]qwenvl.Sample{sm}, smp, []*rand.Rand{rng})
		if err != nil {
			return err
		}
		if s.tok == nil {
			if s.tok, err = hfmodel.LoadTokenizer(dir); err != nil {
				return err
			}
		}
		gen := make([]int, len(out[0]))
		for i, id := range out[0] {
			gen[i] = int(id)
		}
		text, err := s.tok.Decode(gen, *f.skipSpecial)
		if err != nil {
			return err
		}
		if err := enc.Encode(text); err != nil {
			return err
		}
		return w.Flush()
	})
}

// samplingOf is generate's sampling: the flags, with generation_config's max_new_tokens (else
// 256) and stop tokens.
func samplingOf(f *genFlags, gc *hfmodel.GenerationConfig) hflm.Sampling {
	s := hflm.Sampling{MaxNewTokens: *f.maxNew, Temperature: *f.temperature, TopP: *f.topP, TopK: *f.topK}
	if s.MaxNewTokens == 0 {
		s.MaxNewTokens = 256
		if gc.MaxNewTokens != nil {
			s.MaxNewTokens = *gc.MaxNewTokens
		}
	}
	for _, id := range gc.EOSTokenIDs {
		s.Stop = append(s.Stop, int32(id))
	}
	return s
}
